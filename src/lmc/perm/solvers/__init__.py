"""The linear-assignment solvers every matching method calls (:mod:`.assignment`: SciPy,
lapx, and a certified sparse solver, all exact; ``auto`` picks one)."""
