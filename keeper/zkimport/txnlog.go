package zkimport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/adler32"
	"io"

	"github.com/xkeeper/xkeeper/keeper/fsm"
	"github.com/xkeeper/xkeeper/keeper/proto"
)

// ZooKeeper's transaction types (the ops of ZooDefs.OpCode that are
// logged).
const (
	txnCreate          = 1
	txnDelete          = 2
	txnSetData         = 5
	txnSetACL          = 7
	txnCheck           = 13
	txnMulti           = 14
	txnCreate2         = 15
	txnReconfig        = 16
	txnCreateContainer = 19
	txnDeleteContainer = 20
	txnCreateTTL       = 21
	txnCreateSession   = -10
	txnCloseSession    = -11
	txnError           = -1
)

// endOfRecord follows every record of a transaction log.
const endOfRecord = 'B'

// errTornTail marks a log whose last record is incomplete or damaged: what
// a crash in the middle of an append leaves, and where replay stops.
var errTornTail = errors.New("zkimport: the log ends in an incomplete record")

// replayLog applies, in order, every transaction of the log in r whose
// zxid is above t.zxid; it returns how many it applied.
func replayLog(r io.Reader, t *dataTree) (int, error) {
	j := newJuteReader(r)
	j.header(logMagic, "transaction log")
	if j.err != nil {
		return 0, fmt.Errorf("zkimport: %w", j.err)
	}
	applied := 0
	for {
		var head [12]byte
		if _, err := io.ReadFull(j.r, head[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return applied, nil
			}
			return applied, errTornTail
		}
		crc, n := binary.BigEndian.Uint64(head[:8]), int32(binary.BigEndian.Uint32(head[8:]))
		if n == 0 && crc == 0 {
			return applied, nil // the zeros a log is preallocated with
		}
		if n < 0 || n > maxField {
			return applied, errTornTail
		}
		rec := make([]byte, n+1)
		if _, err := io.ReadFull(j.r, rec); err != nil || rec[n] != endOfRecord || uint64(adler32.Checksum(rec[:n])) != crc {
			return applied, errTornTail
		}
		ok, err := t.apply(rec[:n])
		if err != nil {
			return applied, err
		}
		if ok {
			applied++
		}
	}
}

// apply applies one logged transaction (TxnHeader, then its record) if it
// comes after what the tree holds.
func (t *dataTree) apply(rec []byte) (bool, error) {
	d := proto.NewDecoder(rec)
	session, _, zxid, time, typ := d.Int64(), d.Int32(), d.Int64(), d.Int64(), d.Int32()
	if err := d.Err(); err != nil {
		return false, fmt.Errorf("zkimport: transaction header: %w", err)
	}
	if zxid <= t.zxid {
		return false, nil
	}
	if !t.gaps && !follows(t.zxid, zxid) {
		return false, &GapError{After: t.zxid, Next: zxid}
	}
	if err := t.applyTxn(d, typ, session, zxid, time); err != nil {
		return false, fmt.Errorf("zkimport: transaction %#x (type %d): %w", zxid, typ, err)
	}
	t.zxid, t.time = zxid, max(t.time, time)
	return true, nil
}

// follows reports whether zxid next is the transaction right after prev:
// the next counter of the same epoch, or the first of a later one (a new
// leader counts from 1).
func follows(prev, next int64) bool {
	if next>>32 == prev>>32 {
		return next == prev+1
	}
	return next>>32 > prev>>32 && next&0xffffffff <= 1
}

// GapError says that transactions are missing between what the snapshot
// and the logs read so far hold and the next logged transaction: a
// transaction log the import was not given.
type GapError struct{ After, Next int64 }

func (e *GapError) Error() string {
	return fmt.Sprintf("zkimport: transactions after zxid %#x and before %#x are missing: a transaction log is not there "+
		"(ZooKeeper's dataLogDir is --log-dir); importing without them loses those writes", e.After, e.Next)
}

// applyTxn applies one transaction record of type typ. The bytes after
// the record (3.6's digest of the tree) are ignored.
func (t *dataTree) applyTxn(d *proto.Decoder, typ int32, session, zxid, time int64) error {
	switch typ {
	case txnCreate, txnCreate2, txnCreateContainer, txnCreateTTL:
		path, data, acl := d.String(), d.Buffer(), d.ACLs()
		owner := int64(0)
		switch typ {
		case txnCreateContainer:
			owner = fsm.ContainerOwner
		case txnCreateTTL:
			owner = fsm.TTLOwner // kept as a persistent znode: the TTL is not
		default:
			if d.Bool() {
				owner = session
			}
		}
		parentCVersion := d.Int32()
		if err := d.Err(); err != nil {
			return err
		}
		t.create(path, data, acl, owner, parentCVersion, zxid, time)
	case txnDelete, txnDeleteContainer:
		path := d.String()
		if err := d.Err(); err != nil {
			return err
		}
		t.remove(path, zxid)
	case txnSetData, txnReconfig:
		path, data, version := d.String(), d.Buffer(), d.Int32()
		if err := d.Err(); err != nil {
			return err
		}
		t.setData(path, data, version, zxid, time)
	case txnSetACL:
		path, acl, version := d.String(), d.ACLs(), d.Int32()
		if err := d.Err(); err != nil {
			return err
		}
		t.setACL(path, acl, version)
	case txnCloseSession:
		t.closeSession(session, zxid)
	case txnMulti:
		return t.applyMulti(d, session, zxid, time)
	case txnCreateSession, txnCheck, txnError:
	default:
		return fmt.Errorf("unknown transaction type %d", typ)
	}
	return nil
}

// applyMulti applies a multi's transactions; a multi that failed holds
// only error transactions, and changes nothing.
func (t *dataTree) applyMulti(d *proto.Decoder, session, zxid, time int64) error {
	n := d.Int32()
	if n < 0 || n > 1<<20 {
		return fmt.Errorf("a multi of %d transactions", n)
	}
	type sub struct {
		typ  int32
		body []byte
	}
	subs := make([]sub, n)
	for i := range subs {
		subs[i] = sub{d.Int32(), d.Buffer()}
	}
	if err := d.Err(); err != nil {
		return err
	}
	for _, s := range subs {
		if s.typ == txnError {
			return nil
		}
	}
	for _, s := range subs {
		if s.typ == txnMulti {
			return errors.New("a multi inside a multi")
		}
		if err := t.applyTxn(proto.NewDecoder(s.body), s.typ, session, zxid, time); err != nil {
			return err
		}
	}
	return nil
}
