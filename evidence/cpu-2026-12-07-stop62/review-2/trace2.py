"""Re-run one seed with a trace, with the campaign's parameters.
Usage: trace2.py SEED MODE MAX_STALL RATE LONG_P WEIGHT_P STALL_P [T0 T1]"""
import sys, sim
seed, mode = int(sys.argv[1]), sys.argv[2]
ms, rate, lp, wp, sp = map(float, sys.argv[3:8])
r = sim.Run(seed, mode, trace=True, max_stall=ms, rate=rate, long_p=lp, weight_p=wp, stall_p=sp).run()
print("hang", r.hang, "lost old", r.lost[0], "new", r.lost[1])
print("stalls", [(w, round(t, 4), round(d, 3)) for w, t, d in r.stalls])
lines = r.log
if len(sys.argv) > 9:
    a, b = float(sys.argv[8]), float(sys.argv[9])
    lines = [l for l in lines if a <= float(l.split()[0]) <= b]
print("\n".join(l for l in lines if " hb " not in l or "c0" in l))
