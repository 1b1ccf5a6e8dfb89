"""The models trtkit makes itself: classifiers in torchvision's module layout and the cached sample.

``classifiers`` defines ResNet18/34/50 (so torchvision checkpoints load strictly)
and reads and writes checkpoints; ``sample`` trains (once, cached) the small
digits model the main job and the tests use. torch is imported inside functions.
"""
