import sys, io, contextlib, tempfile
src = open('/tmp/review-sup2/sim3.py').read().replace('n == "c0"', 'n == "c2"').replace("_slots['c0']", "_slots['c2']")
src = src.replace("round(s._slots['c2'].moved, 3))", "round(s._slots['c2'].moved, 3), {k2: round(v,3) for k2,v in s._slots['c2'].work.items()})")
ns = {'__name__': 'simx'}; exec(compile(src, 'simx', 'exec'), ns)
with tempfile.TemporaryDirectory() as tmp:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        lost, h = ns['run'](int(sys.argv[1]), tmp, trace=True)
    lines = buf.getvalue().splitlines()
    print('hang at', h, lost)
    idx = [i for i,l in enumerate(lines) if 'read c2' in l]
    for l in lines[max(0,idx[-1]-3):]:
        print(l)
