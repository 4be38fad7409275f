package domain

// TargetRange locates the targets of one benchmark run: they all carry
// RunID and have ids in MinID..MaxID (MaxID 0: the run has no targets).
// Exclusive says that no other target has an id in the range, so the range
// alone selects the run's rows in tables keyed by target id (an index
// range scan) without reading each row's run_id.
type TargetRange struct {
	RunID        string
	MinID, MaxID uint64
	Exclusive    bool
}
