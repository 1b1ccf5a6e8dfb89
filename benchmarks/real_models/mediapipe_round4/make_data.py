"""The round-4 blind-test pictures, as they were made: 40 crops around the four visible hands of insightface
0.7.3's t1.jpg (palm detection) and 36 crops of people in t1.jpg and scikit-image's astronaut and camera (pose
detection), PNG.

    python make_data.py ASSETS OUT      # ASSETS: the folder benchmarks/real_models fetched the photos into
"""
import os
import sys

import numpy as np
from PIL import Image


def hands(t1, folder):
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    W, H = t1.size
    centres = [(654, 470), (968, 628), (490, 683), (243, 448)]  # where MediaPipe's palm detector finds hands
    for i in range(40):
        cx, cy = centres[i % 4]
        side = rng.uniform(140, 520)
        ar = [1.0, 4 / 3., 3 / 4., 16 / 9.][rng.integers(4)]
        w, h = side * np.sqrt(ar), side / np.sqrt(ar)
        ox, oy = rng.uniform(-0.3, 0.3) * w, rng.uniform(-0.3, 0.3) * h
        x1 = int(np.clip(cx + ox - w / 2, 0, W - 10))
        y1 = int(np.clip(cy + oy - h / 2, 0, H - 10))
        crop = t1.crop((x1, y1, int(min(W, x1 + w)), int(min(H, y1 + h))))
        scale = rng.uniform(0.8, 2.0)
        crop = crop.resize((max(32, int(crop.width * scale)), max(32, int(crop.height * scale))), Image.BILINEAR)
        if rng.random() < 0.5:
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        crop.save(os.path.join(folder, "hand_%02d.png" % i))


def people(t1, astro, cam, folder):
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(1)
    faces = [(466, 269, 109, 147), (58, 258, 105, 140), (744, 345, 98, 133), (903, 61, 105, 143),
             (1133, 273, 91, 125), (269, 148, 97, 122)]
    for i in range(36):
        kind = i % 3
        if kind == 0:
            x, y, w, h = faces[rng.integers(len(faces))]
            cx, cy, side, src = x + w / 2, y + h * 1.5, w * rng.uniform(3, 6), t1
        else:
            src = astro if kind == 1 else cam
            cx, cy, side = 256 + rng.uniform(-40, 40), 256 + rng.uniform(-40, 40), rng.uniform(350, 512)
        ar = [1.0, 4 / 3., 3 / 4.][rng.integers(3)]
        w, h = side * np.sqrt(ar), side / np.sqrt(ar)
        W, H = src.size
        crop = src.crop((int(max(0, cx - w / 2)), int(max(0, cy - h / 2)), int(min(W, cx + w / 2)),
                         int(min(H, cy + h / 2))))
        s = rng.uniform(0.5, 1.2)
        crop = crop.resize((max(32, int(crop.width * s)), max(32, int(crop.height * s))), Image.BILINEAR)
        if rng.random() < 0.5:
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        crop.save(os.path.join(folder, "person_%02d.png" % i))


def main(assets, out):
    def read(*parts):
        return Image.open(os.path.join(assets, *parts)).convert("RGB")
    t1 = read("insightface-0.7.3", "insightface-0.7.3__insightface__data__images__t1.jpg")
    hands(t1, os.path.join(out, "palm_data"))
    people(t1, read("scikit-image-0.26.0", "skimage__data__astronaut.png"),
           read("scikit-image-0.26.0", "skimage__data__camera.png"), os.path.join(out, "pose_data"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
