package fsm

// EntryBytes is what request r adds to an entry EncodeEntry makes: its
// body, identities, member and fixed fields. Group commit counts it, so
// that an entry's size is bounded whatever its requests are made of.
func EntryBytes(r *Request) int { return entrySize([]Request{*r}) - entrySize(nil) }
