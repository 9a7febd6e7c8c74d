"""For hung runs where the new rule found the hung channel later than the old: at the old
rule's loss time, does the new supervisor have late-marked work whose deadline is earlier
than the earliest non-late deadline (the late entry is dropped from the min)?"""
import re, sys, sim
fn, args = sys.argv[1], dict(rate=float(sys.argv[2]), long_p=float(sys.argv[3]), weight_p=float(sys.argv[4]))
seeds = [int(m.group(1)) for m in re.finditer(r"seed (\d+): hung \S+ NEW LATER", open(fn).read())]
counts = {"late_entry_earlier_than_min_excusing": 0, "other": 0}
for s in seeds:
    r = sim.Run(s, "hung", **args)
    ch = r.hang[0]
    hit = [False]
    orig = r.tick
    def tick(now, r=r, ch=ch, hit=hit, orig=orig):
        was = ch in r.lost[0]
        orig(now)
        if not was and ch in r.lost[0] and ch not in r.lost[1]:
            slot = r.new._slots[ch]
            late = [slot.work[k] for k in slot.work_late if k in slot.work]
            ok = [d for k, d in slot.work.items() if k not in slot.work_late]
            hit[0] = bool(late and ok and min(late) < min(ok))
    r.tick = tick
    r.run()
    counts["late_entry_earlier_than_min_excusing" if hit[0] else "other"] += 1
    if not hit[0]:
        print("other:", s)
print(fn, len(seeds), counts)
