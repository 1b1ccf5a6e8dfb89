"""What trtkit recognises in a data folder by name: image files by extension, split folders by name.

A leaf module (it imports nothing of trtkit): the folder listing (``sources``) and the box readers
(``boxes.yolo``) both read these, and ``sources`` reads the box readers, so they cannot live in either.
"""

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp", ".gif")
SPLIT_DIRS = {"train": ("train",), "heldout": ("val", "valid", "validation", "test")}
