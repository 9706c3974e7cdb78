"""Running plans on real processes: the runtime, launch, the reference job, calibration, check-run.

Modules here read Plans (or plain data handed to them) and import no cost model or solver; the
one exception is :mod:`planner.run.kernels`, the solver code a job runs inside its step."""
