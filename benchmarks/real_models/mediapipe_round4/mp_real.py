"""MediaPipe's own PalmDetectionCpu / PoseDetectionCpu subgraph on image files: detections in pixels."""
import sys, os, glob, pickle, numpy as np
import types
for _m in ("matplotlib", "matplotlib.pyplot"):
    sys.modules[_m] = types.ModuleType(_m)
import mediapipe as mp
from mediapipe.python._framework_bindings import resource_util
from mediapipe.python import packet_creator, packet_getter
import cv2
resource_util.set_resource_dir(os.path.dirname(os.path.dirname(mp.__file__)))
sub, folder, out, complexity = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
KP = 7 if sub.startswith("Palm") else 4
side = '\n  input_side_packet: "MODEL_COMPLEXITY:mc"' if sub == 'PalmDetectionCpu' else ''
config = '''
input_stream: "image"
output_stream: "detections"
node {
  calculator: "%s"
  input_stream: "IMAGE:image"%s
  output_stream: "DETECTIONS:detections"
}''' % (sub, side)
res = {}
for i, p in enumerate(sorted(glob.glob(folder + '/*.png'))):
    rgb = np.ascontiguousarray(cv2.cvtColor(cv2.imread(p, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB))
    graph = mp.CalculatorGraph(graph_config=config)
    got = []
    graph.observe_output_stream('detections', lambda name, packet: got.append(packet_getter.get_proto_list(packet)))
    graph.start_run({'mc': packet_creator.create_int(complexity)} if side else {})
    graph.add_packet_to_input_stream('image', packet_creator.create_image_frame(image_format=mp.ImageFormat.SRGB, data=rgb).at(0))
    graph.close()
    h, w = rgb.shape[:2]
    boxes, scores, marks = [], [], []
    for dets in got:
        for d in dets:
            b = d.location_data.relative_bounding_box
            boxes.append([b.xmin * w, b.ymin * h, (b.xmin + b.width) * w, (b.ymin + b.height) * h])
            scores.append(d.score[0])
            marks.append([[k.x * w, k.y * h] for k in d.location_data.relative_keypoints])
    k = len(marks[0]) if marks else 0
    res[os.path.basename(p)] = (np.array(boxes).reshape(-1, 4), np.array(scores), np.array(marks, dtype=float).reshape(len(boxes), KP, 2))
pickle.dump(res, open(out, 'wb'))
print(sub, complexity, sum(len(v[0]) for v in res.values()), 'detections on', sum(len(v[0]) > 0 for v in res.values()), 'of', len(res))
