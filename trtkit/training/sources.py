"""Training data: which split is training and which is held out, and clear errors for wrong layouts.

Training reads images through ``trtkit.data.load_images`` like every other
step. This module adds what training needs on top: labels must exist, the
number of classes, default input sizes, and a check for the CIFAR-10 layouts
people get wrong (the parent folder, the .tar.gz, the binary version).
"""

import os

from trtkit.data import is_cifar_folder, load_images
from trtkit.errors import InputError


def default_input_size(source):
    if source in (None, "sample"):
        return 64
    if is_cifar_folder(source):
        return 32
    return 224


def check_source(source):
    """Raise InputError naming the fix for a CIFAR-10 folder in the wrong layout."""
    if source in (None, "sample"):
        return
    path = os.path.expanduser(str(source))
    if not os.path.exists(path):
        raise InputError("data not found: {}".format(source),
                         hint="give 'sample', a CIFAR-10 python folder (cifar-10-batches-py) or a folder of "
                              "class sub-folders of images")
    if os.path.isfile(path) and (path.endswith((".tar.gz", ".tgz")) or "cifar" in os.path.basename(path).lower()):
        raise InputError("{} is an archive, not a folder".format(source),
                         hint="extract it first: tar xzf {} (then pass the cifar-10-batches-py folder)".format(path))
    if not os.path.isdir(path):
        return
    entries = os.listdir(path)
    if is_cifar_folder(path):
        if not os.path.isfile(os.path.join(path, "data_batch_1")):
            raise InputError("CIFAR-10 folder {} has test_batch but no data_batch_1..5 to train on".format(source),
                             hint="extract the whole 'CIFAR-10 python version' archive")
        if not os.path.isfile(os.path.join(path, "test_batch")):
            raise InputError("CIFAR-10 folder {} has no test_batch for the held-out accuracy".format(source),
                             hint="extract the whole 'CIFAR-10 python version' archive")
        return
    for name in entries:
        sub = os.path.join(path, name)
        if os.path.isdir(sub) and is_cifar_folder(sub):
            raise InputError("{} holds a CIFAR-10 folder one level down".format(source),
                             hint="pass --data {}".format(sub))
    binary = [n for n in entries if n.startswith("data_batch_") and n.endswith(".bin")]
    if binary or os.path.isdir(os.path.join(path, "cifar-10-batches-bin")):
        raise InputError("{} is the CIFAR-10 binary version".format(source),
                         hint="trtkit reads the 'CIFAR-10 python version' (cifar-10-python.tar.gz)")
    archives = [n for n in entries if n.endswith((".tar.gz", ".tgz")) and "cifar" in n.lower()]
    if archives:
        raise InputError("{} holds {} but no extracted CIFAR-10 batches".format(source, archives[0]),
                         hint="extract it: tar xzf {}".format(os.path.join(path, archives[0])))


def load_splits(source, contract, limit=None):
    """(train ImageSet, held-out ImageSet, class names) with labels checked."""
    check_source(source)
    train = load_images(source, contract, split="train", limit=limit)
    heldout = load_images(source, contract, split="heldout", limit=limit)
    if train.labels is None or heldout.labels is None:
        raise InputError("{} has no labels to train on".format(source),
                         hint="put the images in one sub-folder per class (root/cat/1.jpg, root/dog/2.jpg)")
    if (train.labels < 0).any():
        raise InputError("{} has images outside class sub-folders".format(source),
                         hint="move every image into its class sub-folder")
    count = int(max(train.labels.max(), heldout.labels.max())) + 1
    names = train.class_names or [str(i) for i in range(count)]
    if len(names) < count:
        names = names + [str(i) for i in range(len(names), count)]
    return train, heldout, list(names)
