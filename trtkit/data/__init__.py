"""Image sources -> float32 NCHW model inputs, by a model's InputContract, in bounded memory.

Every step of trtkit (verification, calibration, benchmarking, training) reads
images through here, so they all see the same pixels::

    selection = select("photos/", contract, split="heldout", limit=5000, seed=0)
    for images, labels in selection.batches(32):   # decoded on the fly
        ...
    calib = select("photos/", contract, split="train", limit=512).load()   # an ImageSet in memory

Sources: ``sample`` (scikit-learn's digits, no download); a folder of class
sub-folders of images (``train/`` + ``val/`` sub-folders are the splits,
otherwise a seeded 80/20 split of the listing); a CIFAR-10 python folder;
``.npy``/``.npz`` arrays (uint8 pixels are preprocessed, floats must already
match the contract). Splits: ``train`` (calibration, training), ``heldout``
(verification), ``all``.

Modules: ``sources`` (listing, splits, subsets, class names), ``preprocess``
(the one pixels -> input function), ``decode`` (PIL, JPEG draft, thread pool),
``arrays`` / ``cifar`` (array sources), ``stream`` (Selection, ImageSet), ``masks``
(segmentation masks), ``boxes`` (detection boxes: COCO, YOLO, VOC, .npz; ``docs/detection-data.md``).
"""

from trtkit.data.cifar import is_cifar_folder
from trtkit.data.preprocess import preprocess
from trtkit.data.sources import IMAGE_EXTENSIONS, SPLITS
from trtkit.data.stream import DEFAULT_MAX_UNREADABLE, ImageSet, Selection, load_images, select

__all__ = ["select", "Selection", "ImageSet", "load_images", "preprocess", "is_cifar_folder", "IMAGE_EXTENSIONS",
           "SPLITS", "DEFAULT_MAX_UNREADABLE"]
