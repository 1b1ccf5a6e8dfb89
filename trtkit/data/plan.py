"""Which images each step of a build gets: calibration, the precision search's tune split, verification.

Every figure a build prints is an estimate from the verified images, so the
plan gives verification every image no other step needs and the model never
saw, and says in the log and the manifest how the data was shared out and why:

- ``--calib-data`` another source: verification takes *all* of ``--data``
  (up to ``--verify-images``), which is what ``--data`` is for: held-out images.
  Calibration draws from the whole calibration source.
- one source for both: calibration draws from its train part (the seeded 80/20
  cut, or its ``train/``), and verification takes every image calibration (and
  the search) did not.
- a source the model was trained on (its train part: the samples, a checkpoint
  whose metadata names the source, ``train/`` + ``val/`` folders, CIFAR-10):
  verification takes its held-out part only, never an image the model learned.
- ``--precision auto``'s tune split never reuses the calibration images while
  others exist (measured before: the search tuned on the 205 images it had
  calibrated on, saw no loss, and chose an INT8 that lost 1.37 points on the
  800 images it had been given): it takes the calibration source's images
  calibration left, else up to a quarter of the images verification would
  get; only where neither has ``MIN_TUNE_IMAGES`` it reuses them, and the log
  says so.

Each source is listed once per split here (``_Listings``): a large folder is
walked, and CIFAR-10 unpickled, once per split whatever the number of steps.
"""

import os

from trtkit import log

MIN_TUNE_IMAGES = 32  # fewer images left beside calibration than this: the tune split reuses calibration's
TUNE_SHARE = 0.25     # at most this share of the verification images goes to the tune split


class Part(object):
    """One step's share: its ``selection`` (a ``data.Selection``, nothing decoded), ``why`` it got those
    images, and for the tune split whether it ``reuses_calibration`` images."""

    def __init__(self, selection, why, reuses_calibration=False):
        self.selection = selection
        self.why = why
        self.reuses_calibration = reuses_calibration

    def to_dict(self):
        record = {"source": str(self.selection.source), "split": self.selection.split,
                  "images": len(self.selection), "why": self.why}
        if self.reuses_calibration:
            record["reuses_calibration"] = True
        return record


class DataPlan(object):
    """The shares of one build: ``verify``, ``calibration`` (None without INT8) and ``tune`` (None when the
    build does not search) Parts; ``separate``: whether calibration has a source of its own."""

    def __init__(self, verify, calibration, tune, separate):
        self.verify = verify
        self.calibration = calibration
        self.tune = tune
        self.separate = separate

    def to_dict(self):
        record = {"verify": self.verify.to_dict(), "separate_calibration_data": self.separate}
        for name, part in (("calibration", self.calibration), ("tune", self.tune)):
            if part is not None:
                record[name] = part.to_dict()
        return record

    def log(self):
        """The shares in one line, and a warning when the tune split must reuse calibration's images."""
        parts = ["verification {} ({})".format(len(self.verify.selection), self.verify.why)]
        for name, part in (("calibration", self.calibration), ("tune split", self.tune)):
            if part is not None:
                parts.append("{} {} ({})".format(name, len(part.selection), part.why))
        log.info("images: " + "; ".join(parts))
        if self.tune is not None and self.tune.reuses_calibration:
            log.warn("the tune split reuses the calibration images: {}".format(self.tune.why))


def same_source(one, other):
    """Whether two data sources name the same data (None is the sample)."""
    return _normal(one) == _normal(other)


def _normal(source):
    source = "sample" if source is None else str(source)
    if os.path.exists(os.path.expanduser(source)):
        return os.path.realpath(os.path.expanduser(source))
    return source


class _Listings(object):
    """``select`` over listings made once per (source, split)."""

    def __init__(self, contract):
        self.contract = contract
        self._made = {}

    def listing(self, source, split):
        from trtkit.data.sources import list_source
        key = (_normal(source), split)
        if key not in self._made:
            self._made[key] = list_source(source, split)
        return self._made[key]

    def own_split(self, source):
        return self.listing(source, "all").own_split

    def select(self, source, split, limit=None, seed=0, exclude=()):
        from trtkit.data import select
        return select(source, self.contract, split=split, limit=limit, seed=seed, exclude=exclude,
                      listing=self.listing(source, split))


def plan_data(data, calib_data, contract, calib_images, calib_seed=0, tune_images=None, verify_limit=None,
              tune_seed=1, calibration_needed=True, trained_on=None):
    """The DataPlan of a build verifying on ``data`` and calibrating on ``calib_data`` (None: ``data``):
    ``calib_images`` drawn by ``calib_seed``, ``tune_images`` (None: no search) by ``tune_seed``,
    ``verify_limit`` images verified at most (None: all). Without ``calibration_needed`` (no INT8 in the
    build) there is no calibration share. ``trained_on``: the source the model was trained on, when known
    (its train part is then never verified on)."""
    listings = _Listings(contract)
    separate = calib_data is not None and not same_source(data, calib_data)
    learned = _learned(listings, data, trained_on)
    calibration = tune = None
    taken = []
    if calibration_needed or tune_images is not None:
        source = calib_data if separate else data
        own = listings.own_split(source)
        split = "train" if (own or not separate or _learned(listings, source, trained_on)) else "all"
        chosen = listings.select(source, split, limit=calib_images, seed=calib_seed)
        calibration = Part(chosen, "{} {}'s {}".format(
            "all of" if len(chosen) < calib_images else "drawn seeded from", source or "sample",
            "images" if split == "all" else ("train/ images" if own else "seeded 80% train part")))
        taken.append(chosen)
        if tune_images is not None:
            tune = _tune_part(listings, source, split, chosen, tune_images, tune_seed)
            if tune.reuses_calibration:
                tune = _tune_from_verification(listings, data, learned, taken, tune_images, tune_seed) or tune
            if not tune.reuses_calibration:
                taken.append(tune.selection)
    verify = _verify_part(listings, data, separate, learned,
                          [s for s in taken if same_source(s.source, data)], verify_limit,
                          tuned_here=tune is not None and not tune.reuses_calibration and same_source(
                              tune.selection.source, data) and tune.selection.split == _verification_split(learned))
    return DataPlan(verify, calibration, tune, separate)


def _learned(listings, data, trained_on):
    """Why ``data``'s train part is the model's own (a sentence), or None: a source with its own split, the
    samples, or the source the model's checkpoint says it was trained on."""
    from trtkit.data.sources import SHAPES
    if listings.own_split(data):
        return "its train/ images are the model's own" if not _is_cifar(data) else "its training batches"
    if data in (None, "sample", SHAPES):
        return "the sample model learned its train part"
    if trained_on is not None and same_source(data, trained_on):
        return "the model's checkpoint says it was trained on it"
    return None


def _verification_split(learned):
    return "heldout" if learned else "all"


def _tune_part(listings, source, split, calibration, count, seed):
    from trtkit.errors import InputError
    try:
        rest = listings.select(source, split, limit=count, seed=seed, exclude=[calibration])
    except InputError:
        rest = None
    if rest is not None and len(rest) >= min(count, MIN_TUNE_IMAGES):
        return Part(rest, "{} {}'s images that calibration did not take".format(
            "all of" if len(rest) < count else "drawn seeded from", source or "sample"))
    again = listings.select(source, split, limit=count, seed=seed)
    left = len(rest) if rest is not None else 0
    return Part(again, "calibration took {} of the {} images it could use, leaving {}, and no other image can "
                       "be spared; give more images (--data, --calib-data) or fewer --calib-images for a tune "
                       "split of its own".format(len(calibration), len(calibration) + left, left),
                reuses_calibration=True)


def _tune_from_verification(listings, data, learned, taken, count, seed):
    """The tune split drawn from the images verification would get when calibration left none of its own: at
    most ``TUNE_SHARE`` of them (the final figures and the budget's bound rest on the rest); None when that is
    fewer than ``MIN_TUNE_IMAGES``."""
    split = _verification_split(learned)
    exclude = [s for s in taken if same_source(s.source, data)]
    pool = len(listings.select(data, split, exclude=exclude)) if _has_images(listings, data, split) else 0
    share = min(count, int(pool * TUNE_SHARE))
    if share < MIN_TUNE_IMAGES:
        return None
    chosen = listings.select(data, split, limit=share, seed=seed, exclude=exclude)
    return Part(chosen, "drawn seeded from the images {} verifies on: calibration left none of its own, so "
                        "{:.0%} of them tune rather than reuse calibration's".format(data or "sample",
                                                                                     share / float(pool)))


def _has_images(listings, data, split):
    return len(listings.listing(data, split)) > 0


def _verify_part(listings, data, separate, learned, taken, limit, tuned_here=False):
    """Verification's Part: every image of ``data`` that the ``taken`` selections (of the same source) did not
    take, up to ``limit``: of its held-out part where the model ``learned`` the rest."""
    name = data or "sample"
    split = _verification_split(learned)
    verify = listings.select(data, split, limit=limit, exclude=taken)
    amount = "all" if limit is None or len(verify) < limit else "drawn seeded from all"
    rest = " less the tune split's" if tuned_here else ""
    if learned:
        why = "{} of {}'s held-out part{} ({})".format(amount, name, rest, learned)
    elif separate:
        why = "{} of {}{}: calibration has data of its own".format(amount, name, rest)
    elif taken:
        why = "{} of {}'s images that calibration{} did not take".format(
            amount, name, " and the tune split" if tuned_here else "")
    else:
        why = "{} of {}: no step calibrates".format(amount, name)
    return Part(verify, why)


def _is_cifar(data):
    from trtkit.data.cifar import is_cifar_folder
    return data is not None and os.path.isdir(str(data)) and is_cifar_folder(str(data))
