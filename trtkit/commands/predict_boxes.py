"""``trtkit predict`` on a detection build: each image's detections printed, drawn and written as COCO JSON.

The loop is ``detect_files`` (``tasks.detection``'s ``predict``, called by ``commands.predict`` as the other
tasks' loops are); what it selects is ``app.detector.Detector``'s, with the flags of
``app.detector.DetectionOptions`` (``--score-threshold``, ``--iou-threshold``, ``--max-detections``,
``--class-agnostic``); the files ``--out`` gets are ``app.box_files``'.
"""

from trtkit.commands.predict import _Nothing


def detect_files(model, files, args, writer, bar, skipped):
    """Detections of ``files`` with a loaded ``Detector``: a block per image (``writer``'s stream; ``--json``: a
    record each), and with ``--out`` the drawn pictures and the COCO files (``app.box_files``)."""
    from trtkit import log
    from trtkit.app.box_files import BoxWriter
    from trtkit.app.detector import DetectionOptions
    from trtkit.fileio import output_dir
    options = DetectionOptions.from_args(args)
    model.configure(**options.to_keywords())
    if not args.json:
        log.info("each image's detections scoring at least {:g}: class, score, box x1 y1 x2 y2 in its pixels".format(
            options.score_threshold))
    drawn = 0
    with output_dir(args.out) if args.out else _Nothing() as out:
        boxes = BoxWriter(out, files, [(i, model.names[i]) for i in model.head.detection_classes()],
                          model.contract) if out else None
        for label, found in model.iter_predict(files, on_unreadable=skipped):
            record = {"image": label, "width": found.size[0], "height": found.size[1], "detections": found.records()}
            if boxes is not None:
                record["drawn"] = boxes.write(label, found)
                drawn += 1
            if args.json:
                writer.write_record(record)
            else:
                writer.stream.write(describe(label, found))
                writer.stream.flush()
            if bar is not None:
                bar.update()
        if boxes is not None:
            results = boxes.close()
    if args.out:
        log.info("drew {} picture(s) into {}; COCO results: {}".format(drawn, args.out, results))


def describe(label, found):
    """An image's detections as text: its path and count, then one line each (class, score, box)."""
    lines = ["{}: {} detection{}".format(label, len(found), "" if len(found) == 1 else "s")]
    width = max([len(name) for name in found.names] + [1])
    for (x1, y1, x2, y2), score, _, name in found:
        lines.append("  {}  {:.3f}  [{:.1f}, {:.1f}, {:.1f}, {:.1f}]".format(name.ljust(width), score, x1, y1, x2, y2))
    return "\n".join(lines) + "\n"
