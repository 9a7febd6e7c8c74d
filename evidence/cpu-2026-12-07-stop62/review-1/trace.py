import sys, sim
seed, mode = int(sys.argv[1]), sys.argv[2]
r = sim.Run(seed, mode, trace=True).run()
print("hang", r.hang, "lost old", r.lost[0], "new", r.lost[1])
lines = r.log
if len(sys.argv) > 4:
    a, b = float(sys.argv[3]), float(sys.argv[4])
    lines = [l for l in lines if a <= float(l.split()[0]) <= b]
print("\n".join(lines[:int(sys.argv[5]) if len(sys.argv) > 5 else 400]))
