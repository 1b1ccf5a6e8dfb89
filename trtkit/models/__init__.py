"""The models trtkit makes itself: classifiers in torchvision's module layout and the cached sample.

``classifiers`` defines ResNet18/34/50 (so torchvision checkpoints load strictly)
and reads and writes checkpoints; ``sample`` trains (once, cached) the small
digits model the main job and the tests use; ``segmentation`` and ``detection`` hold the segmentation and
detection models in torchvision's layout. torch is imported inside functions (``detection``: its
``registry`` imports without torch, the modules it builds from import it).
"""
