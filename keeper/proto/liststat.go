package proto

// ListWithStatsAndDataRequest is ClickHouse Keeper's list with stat and
// data (OpFilteredListWithStatsAndData, flag LIST_WITH_STAT_AND_DATA): a
// filteredList that also asks for each listed child's stat, data or both.
// On the wire, a filteredList's fields (path, watch, kind) then one byte
// each for WithStat and WithData (docs/clickhouse-keeper-layouts.md).
type ListWithStatsAndDataRequest struct {
	FilteredListRequest
	WithStat bool
	WithData bool
}

// ListWithStatsAndData returns the list with stat and data of path's
// children of kind typ.
func ListWithStatsAndData(path string, watch bool, typ uint8, withStat, withData bool) *ListWithStatsAndDataRequest {
	return &ListWithStatsAndDataRequest{*FilteredList(path, watch, typ), withStat, withData}
}

// Encode implements Record.
func (r *ListWithStatsAndDataRequest) Encode(e *Encoder) {
	r.FilteredListRequest.Encode(e)
	e.Bool(r.WithStat)
	e.Bool(r.WithData)
}

// Decode implements Record.
func (r *ListWithStatsAndDataRequest) Decode(d *Decoder) {
	r.FilteredListRequest.Decode(d)
	r.WithStat = d.Bool()
	r.WithData = d.Bool()
}

// ListWithStatsAndDataResponse answers a ListWithStatsAndDataRequest:
// the children's names, the parent's stat, then the children's stats (one
// per name, in the names' order, if asked for; none otherwise) and their
// data (likewise). Both vectors are always sent, empty when not asked for:
// ClickHouse reads them whatever the request's flags.
type ListWithStatsAndDataResponse struct {
	Children []string
	Stat     Stat
	Stats    []Stat
	Data     [][]byte
}

// Encode implements Record.
func (r *ListWithStatsAndDataResponse) Encode(e *Encoder) {
	e.Strings(r.Children)
	r.Stat.Encode(e)
	e.Int32(int32(len(r.Stats)))
	for i := range r.Stats {
		r.Stats[i].Encode(e)
	}
	e.Int32(int32(len(r.Data)))
	for _, b := range r.Data {
		e.Buffer(b)
	}
}

// Decode implements Record.
func (r *ListWithStatsAndDataResponse) Decode(d *Decoder) {
	r.Children = d.Strings()
	r.Stat.Decode(d)
	if n, ok := d.length(StatBytes); ok && n > 0 {
		r.Stats = make([]Stat, n)
		for i := range r.Stats {
			r.Stats[i].Decode(d)
		}
	}
	if n, ok := d.length(4); ok && n > 0 {
		r.Data = make([][]byte, 0, n)
		for i := 0; i < n && d.Err() == nil; i++ {
			r.Data = append(r.Data, d.Buffer())
		}
	}
}
