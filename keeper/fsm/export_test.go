package fsm

// EntryNewest is the newest entry version this binary writes and applies.
const EntryNewest = entryNewest
