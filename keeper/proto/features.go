package proto

// FeatureFlag is a bit of ClickHouse Keeper's feature flags
// (KeeperFeatureFlag): flag n is bit 7-n%8 of byte n/8 of the bitmap
// that /keeper/feature_flags holds.
type FeatureFlag uint

// ClickHouse Keeper's feature flags, in its order (the values are fixed).
const (
	FeatureFilteredList FeatureFlag = iota
	FeatureMultiRead
	FeatureCheckNotExists
	FeatureCreateIfNotExists
	FeatureRemoveRecursive
	FeatureMultiWatches
	FeatureCheckStat
	FeaturePersistentWatches
	FeatureCreateWithStats
	FeatureTryRemove
	FeatureListWithStatAndData
	featureCount
)

// Features are the flags xkeeper advertises: the extensions it serves.
// PERSISTENT_WATCHES is ZooKeeper 3.6's addWatch (opcode 106), whose reply
// ClickHouse 26.7 reads as ZooKeeper's: one int32, the error.
// MULTI_WATCHES: a multiRead's reads set the watches their flags ask for;
// CREATE_WITH_STATS: a multi answers a create2 with create2's result (path
// and stat). Both in ClickHouse Keeper's dialect only, on a connection
// that read /keeper first, as ClickHouse's client does: ZooKeeper 3.8
// sets no watch for a multiRead and answers a multi's create2 with a
// create's result (path alone), and so does xkeeper to anyone else.
// LIST_WITH_STAT_AND_DATA: opcode 506, alone and in a multiRead.
// CHECK_STAT: opcode 504 (CheckStatRequest), alone and in a multi, a
// check that applies through the log (entry version 17).
var Features = []FeatureFlag{FeatureFilteredList, FeatureMultiRead, FeatureCheckNotExists,
	FeatureCreateIfNotExists, FeatureRemoveRecursive, FeatureMultiWatches, FeatureCheckStat,
	FeaturePersistentWatches, FeatureCreateWithStats, FeatureTryRemove, FeatureListWithStatAndData}

// KeeperAPIVersion is what /keeper/api_version holds, for a client too old
// to read the flags: ClickHouse's WITH_CHECK_NOT_EXISTS (filteredList,
// multiRead and checkNotExists).
const KeeperAPIVersion = 3

// FeatureBitmap returns the bitmap of flags, as long as every flag
// ClickHouse knows needs.
func FeatureBitmap(flags ...FeatureFlag) []byte {
	b := make([]byte, (featureCount+7)/8)
	for _, f := range flags {
		for int(f/8) >= len(b) {
			b = append(b, 0)
		}
		b[f/8] |= 1 << (7 - f%8)
	}
	return b
}

// FeatureEnabled reports whether bitmap has flag f set.
func FeatureEnabled(bitmap []byte, f FeatureFlag) bool {
	return int(f/8) < len(bitmap) && bitmap[f/8]&(1<<(7-f%8)) != 0
}
