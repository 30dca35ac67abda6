package main

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/xkeeper/xkeeper/clickhouse"
	"github.com/xkeeper/xkeeper/keeper"
	"github.com/xkeeper/xkeeper/keeper/backup"
	"github.com/xkeeper/xkeeper/keeper/nodelog"
	"github.com/xkeeper/xkeeper/keeper/proto"
	"github.com/xkeeper/xkeeper/keeper/replica"
	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/objects"
	"github.com/xkeeper/xkeeper/recovery"
	"github.com/xkeeper/xkeeper/xshard"
)

// errorDoc is what a failed command prints on stdout under --format json.
type errorDoc struct {
	Error errorBody `json:"error"`
}

// errorBody describes a failure; Code names its cause and is stable.
type errorBody struct {
	Code        string `json:"code"`
	Message     string `json:"message"`
	Exit        int    `json:"exit_code"`
	ZKCode      *int32 `json:"zk_code,omitempty"` // the ZooKeeper error code, where a keeper answered with one
	Shard       string `json:"shard,omitempty"`
	Op          *int   `json:"op,omitempty"` // index of the refusing op within the shard's ops
	Transaction string `json:"transaction,omitempty"`
}

// sentinelCodes name the causes a caller can tell apart by errors.Is.
var sentinelCodes = []struct {
	err  error
	code string
}{
	{movepart.ErrRefused, "refused"}, {movepart.ErrBusy, "busy"}, {movepart.ErrNoMove, "no_move"},
	{movepart.ErrConflict, "conflict"}, {movepart.ErrChanged, "changed"},
	{movepart.ErrLostOwnership, "lost_ownership"}, {movepart.ErrNoAuth, "no_auth"},
	{movepart.ErrUnknownServer, "unknown_server"},
	{clickhouse.ErrNoTable, "no_table"}, {clickhouse.ErrNoPartition, "no_partition"},
	{clickhouse.ErrIncompatible, "incompatible"},
	{objects.ErrUnknownObject, "unknown_object"}, {objects.ErrNoReference, "no_reference"},
	{objects.ErrExists, "exists"}, {objects.ErrDeletable, "deletable"}, {objects.ErrTooOld, "too_old"},
	{objects.ErrConflict, "conflict"},
	{recovery.ErrNoFinding, "no_finding"}, {recovery.ErrNotAcknowledgeable, "not_acknowledgeable"},
	{backup.ErrCorrupt, "corrupt_backup"}, {replica.ErrNotEmpty, "not_empty"},
	{keeper.ErrOtherShard, "other_shard"}, {keeper.ErrNoLeader, "no_leader"}, {nodelog.ErrInUse, "in_use"},
	{nodelog.ErrWriteFailed, "write_failed"}, {nodelog.ErrDamaged, "damaged"}, {replica.ErrMemberRunning, "in_use"},
	{replica.ErrNoQuorum, "no_quorum"}, {replica.ErrChangeBusy, "busy"},
	{context.DeadlineExceeded, "timeout"},
}

// describe turns a command's error and exit code into its JSON form.
func describe(err error, exit int) errorDoc {
	b := errorBody{Code: "failed", Message: err.Error(), Exit: exit}
	var (
		u    usageError
		xe   *xshard.Error
		uo   *xshard.UnknownOutcomeError
		code proto.Code
		ne   net.Error
	)
	switch {
	case errors.As(err, &u):
		b.Code = "usage"
	case errors.As(err, &uo):
		b.Code, b.Transaction = "unknown_outcome", uo.ID
	case errors.As(err, &xe):
		b.Code, b.Shard, b.Transaction = zkCodeName(xe.Code), xe.Shard, xe.ID
		if xe.Op >= 0 {
			b.Op = &xe.Op
		}
	}
	for _, s := range sentinelCodes {
		if b.Code == "failed" && errors.Is(err, s.err) {
			b.Code = s.code
		}
	}
	if errors.As(err, &code) {
		c := int32(code)
		b.ZKCode = &c
		if b.Code == "failed" {
			b.Code = zkCodeName(code)
		}
	}
	if b.Code == "failed" && errors.As(err, &ne) {
		b.Code = "unreachable"
	}
	return errorDoc{b}
}

// zkCodeName is a ZooKeeper error code's name in snake case: "node_exists",
// "bad_version", "locked".
func zkCodeName(c proto.Code) string {
	if c == proto.ErrLocked {
		return "locked"
	}
	if name := c.Name(); name != "" {
		return strings.ReplaceAll(name, " ", "_")
	}
	return "failed"
}
