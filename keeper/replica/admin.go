package replica

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"time"
)

// AdminMagic opens, on a member's client port, a member's link that asks
// about the shard's membership or changes it: after the link
// authenticates, one JSON AdminRequest and one JSON AdminReply.
const AdminMagic = "xkad"

// Admin operations.
const (
	AdminStatus = "status" // this member's Status
	AdminAdd    = "add"    // add ID at RaftAddr (as a voter if Voter); leader only
	AdminRemove = "remove" // remove ID; leader only
)

// AdminRequest is one request on an admin link.
type AdminRequest struct {
	Op       string `json:"op"`
	ID       string `json:"id,omitempty"`
	RaftAddr string `json:"raft_addr,omitempty"`
	Voter    bool   `json:"voter,omitempty"`
}

// AdminReply answers an AdminRequest: this member's status after the
// request, and why it failed if it did.
type AdminReply struct {
	Status    Status `json:"status"`
	Error     string `json:"error,omitempty"`
	Code      string `json:"code,omitempty"`       // names Error's cause if adminCodes has it
	NotLeader bool   `json:"not_leader,omitempty"` // asked of a member that does not lead
}

// adminCodes are the causes of failure an AdminReply names, so that the
// caller can tell them apart (AdminReply.Err).
var adminCodes = map[string]error{"not_leader": ErrNotLeader, "no_quorum": ErrNoQuorum, "busy": ErrChangeBusy}

// Err returns the reply's error, nil if none; errors.Is finds the cause
// its Code names.
func (a AdminReply) Err() error {
	if a.Error == "" {
		return nil
	}
	return adminError{msg: a.Error, cause: adminCodes[a.Code]}
}

// adminError is a failure an admin link reported.
type adminError struct {
	msg   string
	cause error // nil if it named none
}

func (e adminError) Error() string { return e.msg }
func (e adminError) Unwrap() error { return e.cause }

// failed sets the reply's error and its code.
func (a *AdminReply) failed(err error) {
	a.Error, a.NotLeader = err.Error(), errors.Is(err, ErrNotLeader)
	for code, cause := range adminCodes {
		if errors.Is(err, cause) {
			a.Code = code
		}
	}
}

// Status is what a member tells about itself and its shard.
type Status struct {
	ID           string   `json:"id"`
	Shard        string   `json:"shard"`
	Identity     string   `json:"identity"`
	Leader       string   `json:"leader"`
	IsLeader     bool     `json:"is_leader"`
	Members      []Member `json:"members"` // the replicated configuration as this member knows it
	CommitIndex  uint64   `json:"commit_index"`
	AppliedIndex uint64   `json:"applied_index"` // raft's: entries handed to the state machine, thousands perhaps still queued
	// StateApplied is the index of the last entry the member's state holds
	// (Replica.StateApplied). Nil from a member older than the field; read
	// it with Applied.
	StateApplied *uint64 `json:"state_applied,omitempty"`
	// LogStalled is set while the member's Raft log write has been under
	// way longer than keeper.log_stall_timeout: a disk that stopped
	// answering, so that the member can neither lead nor keep up.
	LogStalled bool `json:"log_stalled,omitempty"`
	// LogFailed is the error of the member's last Raft log write if it
	// failed (LogFailed).
	LogFailed string `json:"log_failed,omitempty"`
	// Unheard, on the leader, are the members it has not heard from
	// within an election timeout (Unheard).
	Unheard []string `json:"unheard,omitempty"`
	// Adoptable, in the answer to a status request that names a member
	// (AdminRequest.ID), says that the member named may take this member's
	// identity as its own (Replica.HandIdentity).
	Adoptable bool `json:"adoptable,omitempty"`
	// Term is the member's current Raft term.
	Term uint64 `json:"term"`
	// LeaderTerm is the term in which this member leads, when it was seen
	// leading with the term unchanged around the look (raft drops the
	// leadership before it takes a higher term); 0 otherwise.
	LeaderTerm uint64 `json:"leader_term,omitempty"`
}

// Applied returns the index of the last entry the member's state holds:
// StateApplied, or raft's AppliedIndex from a member too old to tell it.
func (s Status) Applied() uint64 {
	if s.StateApplied == nil {
		return s.AppliedIndex
	}
	return *s.StateApplied
}

// Status returns this member's status.
func (r *Replica) Status() Status {
	members, _ := r.Members()
	term := r.raft.CurrentTerm()
	leads := r.IsLeader()
	var leaderTerm uint64
	if leads && r.raft.CurrentTerm() == term {
		leaderTerm = term
	}
	applied := r.StateApplied()
	return Status{ID: r.cfg.ID, Shard: r.cfg.Shard, Identity: r.identity, Leader: r.Leader(), IsLeader: leads, Term: term, LeaderTerm: leaderTerm,
		Members: members, CommitIndex: r.raft.CommitIndex(), AppliedIndex: r.raft.AppliedIndex(), StateApplied: &applied,
		LogStalled: r.LogStall() > 0, LogFailed: errString(r.LogFailed()), Unheard: r.Unheard()}
}

// LogFailed returns the error of the member's last Raft log write if it
// failed, nil if it succeeded; on a node log, the error after which the log
// takes no more writes (until the process restarts) even if this member has
// written nothing since.
func (r *Replica) LogFailed() error {
	if r.nodeLog != nil {
		if err := r.nodeLog.Failed(); err != nil {
			return err
		}
	}
	return r.logFault.last()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// LogStall returns how long the member's Raft log write under way has run,
// if longer than keeper.log_stall_timeout (the member then sends no
// append: stallWatch), and 0 otherwise.
func (r *Replica) LogStall() time.Duration {
	if r.trans == nil {
		return 0 // not started
	}
	return r.trans.stall.overdue()
}

// adminTimeout bounds an admin request, a membership change included.
const adminTimeout = membershipTimeout + 5*time.Second

// ServeAdmin answers one request on an admin link whose magic and member
// proof the caller has checked.
func (r *Replica) ServeAdmin(c net.Conn) {
	c.SetDeadline(time.Now().Add(adminTimeout))
	var req AdminRequest
	if err := json.NewDecoder(io.LimitReader(c, 4096)).Decode(&req); err != nil {
		return
	}
	var err error
	switch req.Op {
	case AdminStatus:
	case AdminAdd:
		if req.ID == "" || req.RaftAddr == "" {
			err = errors.New("replica: add needs the member's id and raft address")
			break
		}
		err = r.AddMember(req.ID, req.RaftAddr, req.Voter)
		if err == nil {
			r.log.Info("member added", "id", req.ID, "raft_addr", req.RaftAddr, "voter", req.Voter)
		}
	case AdminRemove:
		err = r.RemoveMember(req.ID)
		if err == nil {
			r.log.Info("member removed", "id", req.ID)
		}
	default:
		err = errors.New("replica: unknown admin op " + req.Op)
	}
	reply := AdminReply{Status: r.Status()}
	if req.Op == AdminStatus && req.ID != "" {
		reply.Status.Adoptable = r.HandIdentity(req.ID)
	}
	if err != nil {
		reply.failed(err)
	}
	json.NewEncoder(c).Encode(reply)
}
