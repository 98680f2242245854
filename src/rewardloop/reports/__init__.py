"""What a run's files say, for people: the summary table and its curves, a fan-out's comparison, the best
checkpoint, `inspect` of any artifact, the benchmark table, the eval's image grids and the block a run
prints at its end. Readers only: they open the files the stages wrote (results_layout names them) and
write nothing into a run but the report's own files."""
