"""Running plans on real processes: the runtime, launch, the reference job, calibration, check-run."""
