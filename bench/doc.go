// Package bench is a load generator for any ZooKeeper-protocol endpoint
// (xkeeper, Apache ZooKeeper, ClickHouse Keeper): N clients, each with its
// own session, run one operation in a closed loop for a duration or a
// request count, and the run reports throughput, latency percentiles and
// errors by code.
package bench
