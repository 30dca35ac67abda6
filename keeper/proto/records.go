package proto

// Stat is a znode's metadata, in ZooKeeper's field order.
type Stat struct {
	Czxid          int64
	Mzxid          int64
	Ctime          int64
	Mtime          int64
	Version        int32
	Cversion       int32
	Aversion       int32
	EphemeralOwner int64
	DataLength     int32
	NumChildren    int32
	Pzxid          int64
}

// Encode implements Record.
func (s *Stat) Encode(e *Encoder) {
	e.Int64(s.Czxid)
	e.Int64(s.Mzxid)
	e.Int64(s.Ctime)
	e.Int64(s.Mtime)
	e.Int32(s.Version)
	e.Int32(s.Cversion)
	e.Int32(s.Aversion)
	e.Int64(s.EphemeralOwner)
	e.Int32(s.DataLength)
	e.Int32(s.NumChildren)
	e.Int64(s.Pzxid)
}

// Decode implements Record.
func (s *Stat) Decode(d *Decoder) {
	s.Czxid = d.Int64()
	s.Mzxid = d.Int64()
	s.Ctime = d.Int64()
	s.Mtime = d.Int64()
	s.Version = d.Int32()
	s.Cversion = d.Int32()
	s.Aversion = d.Int32()
	s.EphemeralOwner = d.Int64()
	s.DataLength = d.Int32()
	s.NumChildren = d.Int32()
	s.Pzxid = d.Int64()
}

// ID is an authenticated identity: a scheme and an id within it.
type ID struct {
	Scheme string
	ID     string
}

// ACL grants Perms to an identity.
type ACL struct {
	Perms int32
	ID
}

// WorldACL returns the ACL that grants perms to everyone.
func WorldACL(perms int32) []ACL {
	return []ACL{{Perms: perms, ID: ID{Scheme: "world", ID: "anyone"}}}
}

func encodeACLs(e *Encoder, acl []ACL) {
	e.Int32(int32(len(acl)))
	for _, a := range acl {
		e.Int32(a.Perms)
		e.String(a.Scheme)
		e.String(a.ID.ID)
	}
}

// ACLs reads a vector of ACL entries; length -1 yields nil. A count the
// remaining bytes cannot hold is an error, never a shorter list.
func (d *Decoder) ACLs() []ACL {
	n, ok := d.length(12)
	if !ok || n < 0 {
		return nil
	}
	acl := make([]ACL, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		acl = append(acl, ACL{Perms: d.Int32(), ID: ID{Scheme: d.String(), ID: d.String()}})
	}
	return acl
}

// RequestHeader starts every request after the handshake.
type RequestHeader struct {
	Xid    int32
	OpCode OpCode
}

// Encode implements Record.
func (h *RequestHeader) Encode(e *Encoder) { e.Int32(h.Xid); e.Int32(int32(h.OpCode)) }

// Decode implements Record.
func (h *RequestHeader) Decode(d *Decoder) { h.Xid = d.Int32(); h.OpCode = OpCode(d.Int32()) }

// ReplyHeader starts every reply and notification.
type ReplyHeader struct {
	Xid  int32
	Zxid int64
	Err  Code
}

// Encode implements Record.
func (h *ReplyHeader) Encode(e *Encoder) { e.Int32(h.Xid); e.Int64(h.Zxid); e.Int32(int32(h.Err)) }

// Decode implements Record.
func (h *ReplyHeader) Decode(d *Decoder) {
	h.Xid = d.Int32()
	h.Zxid = d.Int64()
	h.Err = Code(d.Int32())
}

// ConnectRequest is the handshake a client sends first. HasReadOnly
// records whether the optional readOnly byte was present (45 bytes rather
// than 44), because the reply must mirror it.
type ConnectRequest struct {
	ProtocolVersion int32
	LastZxidSeen    int64
	Timeout         int32
	SessionID       int64
	Passwd          []byte
	ReadOnly        bool
	HasReadOnly     bool
}

// Encode implements Record.
func (c *ConnectRequest) Encode(e *Encoder) {
	e.Int32(c.ProtocolVersion)
	e.Int64(c.LastZxidSeen)
	e.Int32(c.Timeout)
	e.Int64(c.SessionID)
	e.Buffer(c.Passwd)
	if c.HasReadOnly {
		e.Bool(c.ReadOnly)
	}
}

// Decode implements Record.
func (c *ConnectRequest) Decode(d *Decoder) {
	c.ProtocolVersion = d.Int32()
	c.LastZxidSeen = d.Int64()
	c.Timeout = d.Int32()
	c.SessionID = d.Int64()
	c.Passwd = d.Buffer()
	if d.Remaining() > 0 {
		c.HasReadOnly = true
		c.ReadOnly = d.Bool()
	}
}

// ConnectResponse answers the handshake.
type ConnectResponse struct {
	ProtocolVersion int32
	Timeout         int32
	SessionID       int64
	Passwd          []byte
	ReadOnly        bool
	HasReadOnly     bool
}

// Encode implements Record.
func (c *ConnectResponse) Encode(e *Encoder) {
	e.Int32(c.ProtocolVersion)
	e.Int32(c.Timeout)
	e.Int64(c.SessionID)
	e.Buffer(c.Passwd)
	if c.HasReadOnly {
		e.Bool(c.ReadOnly)
	}
}

// Decode implements Record.
func (c *ConnectResponse) Decode(d *Decoder) {
	c.ProtocolVersion = d.Int32()
	c.Timeout = d.Int32()
	c.SessionID = d.Int64()
	c.Passwd = d.Buffer()
	if d.Remaining() > 0 {
		c.HasReadOnly = true
		c.ReadOnly = d.Bool()
	}
}

// WatcherEvent is the body of a notification (xid -1).
type WatcherEvent struct {
	Type  EventType
	State State
	Path  string
}

// Encode implements Record.
func (w *WatcherEvent) Encode(e *Encoder) {
	e.Int32(int32(w.Type))
	e.Int32(int32(w.State))
	e.String(w.Path)
}

// Decode implements Record.
func (w *WatcherEvent) Decode(d *Decoder) {
	w.Type = EventType(d.Int32())
	w.State = State(d.Int32())
	w.Path = d.String()
}
