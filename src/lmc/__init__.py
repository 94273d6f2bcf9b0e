"""lmc: linear mode connectivity research.

The pipeline runs one way (see docs/design.md):
config -> data -> models -> store -> train -> perm -> merge -> metrics -> analysis
-> pair -> experiments -> report, with the ``lmc`` command on top.

Convention used everywhere: the path between two models is
theta(lam) = (1 - lam) * theta_A + lam * theta_B, so lam = 0 is A and lam = 1 is B.
"""

__version__ = "0.1.0"
