"""Running a benchmark: the plan of cells, rounds, worker processes and executors."""
