// Package recovery finds and finishes what a crash left half done:
// Audit reads every keeper shard, every ClickHouse server and every table
// the cluster file names and reports what is wrong (unfinished moves,
// partitions in both tables or in neither, stray locks and staging tables,
// in-doubt cross-shard transactions, and, with security.auth set, znodes
// of xkeeper's it does not protect); Recover drives every unfinished move
// to its end, removes the strays and protects those znodes, in parallel,
// safely beside live moves and other recoveries.
package recovery
