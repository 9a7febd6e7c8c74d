import sys, importlib.util
spec = importlib.util.spec_from_file_location("old_supervisor", "/tmp/review-sup2/old_supervisor.py")
old = importlib.util.module_from_spec(spec); sys.modules["old_supervisor"] = old; spec.loader.exec_module(old)
OldSupervisor = old.Supervisor
