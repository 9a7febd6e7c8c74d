#!/bin/bash
# two queues, one per core; each job < 4 min
cd /tmp/rev62b; export PYTHONPATH=/work/wt-sup; P=/work/wt-sup/.venv/bin/python
q1() {
 timeout 240 $P sim.py healthy 1500 0 1.5 0.5 0.3 0.3 > out_healthy_w.txt
 timeout 240 $P sim.py healthy 1200 0 1.5 0.5 0.5 0.0 0.02 > out_healthy_noweights.txt
 timeout 240 $P sim.py healthy 500 0 1.5 0.5 0.3 0.3 0.0 > out_healthy_nostall.txt
 timeout 240 $P sim.py healthy 1000 5000 3.0 0.5 0.3 0.3 0.05 > out_healthy_w_long_stalls.txt
}
q2() {
 timeout 240 $P sim.py hung 1000 100000 1.5 0.5 0.3 0.3 > out_hung_w.txt
 timeout 240 $P sim.py hung 600 200000 1.5 4.0 0.15 0.05 0.02 > out_hung_default_w.txt
 timeout 240 $P sim.py hung 400 300000 1.5 0.5 0.3 0.3 0.0 > out_hung_nostall.txt
 timeout 240 $P sim.py hung 1000 400000 3.0 0.5 0.3 0.3 0.05 > out_hung_w_long_stalls.txt
}
q1 & q2 & wait
timeout 240 $P sim.py healthy 1500 0 1.5 4.0 0.15 0.05 > out_healthy_default_w.txt &
timeout 240 $P sim.py healthy 1500 10000 1.5 0.5 0.3 0.3 0.05 > out_healthy_w_stall05.txt &
wait
echo done > campaigns.done
