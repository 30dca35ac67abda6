package proto

// CreateRequest creates a znode (create, create2, createContainer).
type CreateRequest struct {
	Path  string
	Data  []byte
	ACL   []ACL
	Flags int32
}

// Encode implements Record.
func (r *CreateRequest) Encode(e *Encoder) {
	e.String(r.Path)
	e.Buffer(r.Data)
	encodeACLs(e, r.ACL)
	e.Int32(r.Flags)
}

// Decode implements Record.
func (r *CreateRequest) Decode(d *Decoder) {
	r.Path = d.String()
	r.Data = d.Buffer()
	r.ACL = d.ACLs()
	r.Flags = d.Int32()
}

// CreateTTLRequest creates a znode with a time to live.
type CreateTTLRequest struct {
	CreateRequest
	TTL int64
}

// Encode implements Record.
func (r *CreateTTLRequest) Encode(e *Encoder) { r.CreateRequest.Encode(e); e.Int64(r.TTL) }

// Decode implements Record.
func (r *CreateTTLRequest) Decode(d *Decoder) { r.CreateRequest.Decode(d); r.TTL = d.Int64() }

// PathVersionRequest is the shape of delete and check: a path and an
// expected version (-1 for any).
type PathVersionRequest struct {
	Path    string
	Version int32
}

// Encode implements Record.
func (r *PathVersionRequest) Encode(e *Encoder) { e.String(r.Path); e.Int32(r.Version) }

// Decode implements Record.
func (r *PathVersionRequest) Decode(d *Decoder) { r.Path = d.String(); r.Version = d.Int32() }

// PathWatchRequest is the shape of exists, getData, getChildren and
// getChildren2: a path and whether to leave a watch.
type PathWatchRequest struct {
	Path  string
	Watch bool
}

// Encode implements Record.
func (r *PathWatchRequest) Encode(e *Encoder) { e.String(r.Path); e.Bool(r.Watch) }

// Decode implements Record.
func (r *PathWatchRequest) Decode(d *Decoder) { r.Path = d.String(); r.Watch = d.Bool() }

// PathRequest carries a path alone (getACL, sync, getAllChildrenNumber,
// getEphemerals) and is also the response of create and sync.
type PathRequest struct{ Path string }

// Encode implements Record.
func (r *PathRequest) Encode(e *Encoder) { e.String(r.Path) }

// Decode implements Record.
func (r *PathRequest) Decode(d *Decoder) { r.Path = d.String() }

// SetDataRequest replaces a znode's data.
type SetDataRequest struct {
	Path    string
	Data    []byte
	Version int32
}

// Encode implements Record.
func (r *SetDataRequest) Encode(e *Encoder) { e.String(r.Path); e.Buffer(r.Data); e.Int32(r.Version) }

// Decode implements Record.
func (r *SetDataRequest) Decode(d *Decoder) {
	r.Path = d.String()
	r.Data = d.Buffer()
	r.Version = d.Int32()
}

// SetACLRequest replaces a znode's ACL.
type SetACLRequest struct {
	Path    string
	ACL     []ACL
	Version int32
}

// Encode implements Record.
func (r *SetACLRequest) Encode(e *Encoder) {
	e.String(r.Path)
	encodeACLs(e, r.ACL)
	e.Int32(r.Version)
}

// Decode implements Record.
func (r *SetACLRequest) Decode(d *Decoder) {
	r.Path = d.String()
	r.ACL = d.ACLs()
	r.Version = d.Int32()
}

// AuthPacket adds an identity to the connection.
type AuthPacket struct {
	Type   int32
	Scheme string
	Auth   []byte
}

// Encode implements Record.
func (r *AuthPacket) Encode(e *Encoder) { e.Int32(r.Type); e.String(r.Scheme); e.Buffer(r.Auth) }

// Decode implements Record.
func (r *AuthPacket) Decode(d *Decoder) {
	r.Type = d.Int32()
	r.Scheme = d.String()
	r.Auth = d.Buffer()
}

// SetWatchesRequest re-registers watches after a reconnect (setWatches and
// setWatches2; the persistent lists exist only in setWatches2).
type SetWatchesRequest struct {
	RelativeZxid               int64
	DataWatches                []string
	ExistWatches               []string
	ChildWatches               []string
	PersistentWatches          []string
	PersistentRecursiveWatches []string
	V2                         bool
}

// Encode implements Record.
func (r *SetWatchesRequest) Encode(e *Encoder) {
	e.Int64(r.RelativeZxid)
	e.Strings(r.DataWatches)
	e.Strings(r.ExistWatches)
	e.Strings(r.ChildWatches)
	if r.V2 {
		e.Strings(r.PersistentWatches)
		e.Strings(r.PersistentRecursiveWatches)
	}
}

// Decode implements Record.
func (r *SetWatchesRequest) Decode(d *Decoder) {
	r.RelativeZxid = d.Int64()
	r.DataWatches = d.Strings()
	r.ExistWatches = d.Strings()
	r.ChildWatches = d.Strings()
	if r.V2 {
		r.PersistentWatches = d.Strings()
		r.PersistentRecursiveWatches = d.Strings()
	}
}

// AddWatchRequest adds a persistent watch.
type AddWatchRequest struct {
	Path string
	Mode int32
}

// Encode implements Record.
func (r *AddWatchRequest) Encode(e *Encoder) { e.String(r.Path); e.Int32(r.Mode) }

// Decode implements Record.
func (r *AddWatchRequest) Decode(d *Decoder) { r.Path = d.String(); r.Mode = d.Int32() }

// Empty is a record with no fields (ping, closeSession, whoAmI requests and
// the replies of delete, setWatches and auth).
type Empty struct{}

// Encode implements Record.
func (Empty) Encode(*Encoder) {}

// Decode implements Record.
func (Empty) Decode(*Decoder) {}
