package proto

// Modes of addWatch (ZooKeeper's AddWatchMode).
const (
	AddWatchPersistent          int32 = 0
	AddWatchPersistentRecursive int32 = 1
)

// Watcher types of removeWatches and checkWatches (ZooKeeper's
// WatcherType). ZooKeeper 3.8 knows the first three and answers a
// marshalling error for the others; Persistent and PersistentRecursive are
// 3.9's.
const (
	WatcherChildren            int32 = 1
	WatcherData                int32 = 2
	WatcherAny                 int32 = 3
	WatcherPersistent          int32 = 4
	WatcherPersistentRecursive int32 = 5
)

// WatchesRequest is the shape of removeWatches and checkWatches
// (RemoveWatchesRequest, CheckWatchesRequest): a path and a watcher type.
type WatchesRequest struct {
	Path string
	Type int32
}

// Encode implements Record.
func (r *WatchesRequest) Encode(e *Encoder) { e.String(r.Path); e.Int32(r.Type) }

// Decode implements Record.
func (r *WatchesRequest) Decode(d *Decoder) { r.Path = d.String(); r.Type = d.Int32() }

// ErrorResponse is a bare error code as a reply body: ZooKeeper answers
// addWatch with one (0).
type ErrorResponse struct{ Err Code }

// Encode implements Record.
func (r *ErrorResponse) Encode(e *Encoder) { e.Int32(int32(r.Err)) }

// Decode implements Record.
func (r *ErrorResponse) Decode(d *Decoder) { r.Err = Code(d.Int32()) }
