"""``topk``: a graph that keeps its best K (box, class) pairs by a ``TopK`` of its flattened scores, with no NMS
(CenterNet/DETR-style; ``tf.math.top_k`` then a gather of the boxes by ``index // C`` in a tf2onnx export, or by
``index % A`` when the scores were transposed to ``[N, C, A]`` before the flattening), cut before the TopK.

Why as ``nms``'s subclass: after the cut the graph is what ``nms`` reads (boxes ``[N, A, 4]``, class scores
``[N, A, C]``, yxyx fractions for a channels-last TensorFlow graph), and the K best pairs are ``nms``'s
selection with NMS at IoU 1 (nothing suppressed: each (box, class) pair its own candidate), no score threshold
and K detections; only the cut differs (``tails`` reads the TopK).
"""

from trtkit.detect.decoders import tails, topk
from trtkit.detect.decoders.base import check_known, fail
from trtkit.detect.decoders.nms import PARAMS, Nms


class TopK(Nms):
    name = "topk"
    summary = "a graph keeping its best K (box, class) pairs by a TopK with no NMS, cut before it"

    def cut(self, model, given):
        """``model`` (in place) ending at the boxes and the class scores a TopK of the best K pairs reads;
        returns ``given`` over what was read (``nms``'s parameters: NMS at IoU 1, no score threshold, K)."""
        from trtkit.onnx.layout import is_nhwc
        from trtkit.onnx.load import keep_outputs
        check_known(given, PARAMS, self.name)
        nodes = tails.top_level_topks(model)
        if len(nodes) != 1 or not tails.best_k(model):
            raise fail("--decoder topk: the graph has {} top-level TopK nodes{}; trtkit reads one TopK of the best "
                       "(box, class) pairs with no NMS".format(len(nodes), " and an NMS or a Loop" if nodes else ""),
                       hint="pass --decoder nms for a graph with NonMaxSuppression inside")
        node, index = nodes[0], topk.Index(model)
        k = topk.constant_k(index, node.input[1]) if len(node.input) > 1 else None
        scores = tails.flat_scores(index, node.input[0])
        boxes = tails.gathered_boxes(index, node)
        if k is None or scores is None or boxes is None:
            raise fail("--decoder topk: the TopK '{}' does not pick a constant K of flattened scores whose boxes "
                       "are gathered by its indices (k {}, scores {}, boxes {})".format(
                           node.name or node.output[0], k, scores, boxes),
                       hint="name the network's outputs: --decoder nms --decoder-param boxes=NAME --decoder-param "
                            "scores=NAME, with iou_threshold=1 score_threshold=0 detections=K for the best K pairs")
        # "auto": the flattened scores as they are, [N, A, C] (anchor-major) or [N, C, A] (class-major, a
        # Transpose before the flattening), told apart by the boxes' count in ``nms.infer``
        read = {"boxes": boxes, "scores": scores, "class_axis": "auto", "class_agnostic": False, "center_point_box": 0,
                "order": "yxyx" if is_nhwc(model) else "xyxy", "iou_threshold": 1.0, "score_threshold": 0.0,
                "detections": int(k), "max_output_boxes_per_class": int(k)}
        outputs = [o.name for o in model.graph.output]
        removed = keep_outputs(model, [given.get("boxes", boxes), given.get("scores", scores)])
        read["dropped"] = {"outputs": outputs, "nodes": removed, "topk": node.name or node.output[0]}
        read.update(given)
        return read
