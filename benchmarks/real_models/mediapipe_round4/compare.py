import sys, os, pickle, numpy as np
sys.path.insert(0, '/work/wt-blind')
from benchmarks.real_detectors import agreement
import trtkit
name, build = sys.argv[1], sys.argv[2]
precisions = sys.argv[3].split(',') if len(sys.argv) > 3 else ['fp32', 'fp16', 'int8']
ref = pickle.load(open(sys.argv[4] if len(sys.argv) > 4 else 'ref_palm.pkl', 'rb'))[name]
files = sorted(ref)
folder = os.environ.get('DATA', 'palm_data')
paths = [os.path.join(folder, f) for f in files]
expected = [(ref[f][0], ref[f][1], np.zeros(len(ref[f][1]), np.int64), ref[f][2]) for f in files]
for p in precisions:
    with trtkit.load(build, precision=p) as m:
        preds = list(m.predict(paths, score_threshold=float(os.environ.get('THR', 0.5))))
    found = [(np.asarray(d.boxes, float).reshape(-1, 4), np.asarray(d.scores, float),
              np.asarray(d.labels, np.int64), d.landmarks) for d in preds]
    a = agreement(found, expected)
    print(name, p, {k: (round(v, 4) if isinstance(v, float) else v) for k, v in a.items()})
