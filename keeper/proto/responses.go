package proto

import "encoding/binary"

// StatResponse carries a Stat alone (exists, setData, setACL).
type StatResponse struct{ Stat Stat }

// Encode implements Record.
func (r *StatResponse) Encode(e *Encoder) { r.Stat.Encode(e) }

// Decode implements Record.
func (r *StatResponse) Decode(d *Decoder) { r.Stat.Decode(d) }

// Create2Response is the reply of create2, createContainer and createTTL.
type Create2Response struct {
	Path string
	Stat Stat
}

// Encode implements Record.
func (r *Create2Response) Encode(e *Encoder) { e.String(r.Path); r.Stat.Encode(e) }

// Decode implements Record.
func (r *Create2Response) Decode(d *Decoder) { r.Path = d.String(); r.Stat.Decode(d) }

// GetDataResponse is the reply of getData.
type GetDataResponse struct {
	Data []byte
	Stat Stat
}

// Encode implements Record.
func (r *GetDataResponse) Encode(e *Encoder) { e.Buffer(r.Data); r.Stat.Encode(e) }

// Decode implements Record.
func (r *GetDataResponse) Decode(d *Decoder) { r.Data = d.Buffer(); r.Stat.Decode(d) }

// GetACLResponse is the reply of getACL.
type GetACLResponse struct {
	ACL  []ACL
	Stat Stat
}

// Encode implements Record.
func (r *GetACLResponse) Encode(e *Encoder) { encodeACLs(e, r.ACL); r.Stat.Encode(e) }

// Decode implements Record.
func (r *GetACLResponse) Decode(d *Decoder) { r.ACL = d.ACLs(); r.Stat.Decode(d) }

// ChildrenResponse is the reply of getChildren and, with a Stat, of
// getChildren2 and of getEphemerals (Paths only).
type ChildrenResponse struct {
	Children []string
	Vector   []byte // Children as jute encodes them, when the server keeps that: sent as is
	Stat     Stat
	WithStat bool
}

// Encode implements Record.
func (r *ChildrenResponse) Encode(e *Encoder) {
	if r.Vector != nil {
		e.buf = append(e.buf, r.Vector...)
	} else {
		e.Strings(r.Children)
	}
	if r.WithStat {
		r.Stat.Encode(e)
	}
}

// AppendFrameParts is AppendFrame(buf, h, r) in parts, for a response
// with a Vector: head (buf, then the frame's length, h and nothing of r
// before the Vector), the Vector itself, not copied, and tail (what
// follows it: the Stat, if any), to be sent in that order. Without a
// Vector, head is the whole frame.
func (r *ChildrenResponse) AppendFrameParts(buf []byte, h *ReplyHeader) (head, vector, tail []byte) {
	if r.Vector == nil {
		return AppendFrame(buf, h, r), nil, nil
	}
	start := len(buf)
	buf = append(buf, 0, 0, 0, 0)
	e := NewEncoder(buf)
	h.Encode(e)
	split := len(e.Bytes())
	if r.WithStat {
		r.Stat.Encode(e)
	}
	buf = e.Bytes()
	binary.BigEndian.PutUint32(buf[start:], uint32(len(buf)-start-4+len(r.Vector)))
	return buf[:split], r.Vector, buf[split:]
}

// Decode implements Record.
func (r *ChildrenResponse) Decode(d *Decoder) {
	r.Children = d.Strings()
	if r.WithStat {
		r.Stat.Decode(d)
	}
}

// CountResponse is the reply of getAllChildrenNumber.
type CountResponse struct{ Count int32 }

// Encode implements Record.
func (r *CountResponse) Encode(e *Encoder) { e.Int32(r.Count) }

// Decode implements Record.
func (r *CountResponse) Decode(d *Decoder) { r.Count = d.Int32() }

// WhoAmIResponse lists the identities of the connection.
type WhoAmIResponse struct{ IDs []ID }

// Encode implements Record.
func (r *WhoAmIResponse) Encode(e *Encoder) {
	e.Int32(int32(len(r.IDs)))
	for _, id := range r.IDs {
		e.String(id.Scheme)
		e.String(id.ID)
	}
}

// Decode implements Record.
func (r *WhoAmIResponse) Decode(d *Decoder) {
	n, ok := d.length(8)
	if !ok || n < 0 {
		return
	}
	r.IDs = make([]ID, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		r.IDs = append(r.IDs, ID{Scheme: d.String(), ID: d.String()})
	}
}
