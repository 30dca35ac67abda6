package objects_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/xkeeper/xkeeper/movepart"
	"github.com/xkeeper/xkeeper/movepart/objects"
	"github.com/xkeeper/xkeeper/xshard"
)

// refSet is a set of references: ref → the key of the object it refers to.
type refSet map[objects.Ref]string

// String lists the references in order: the set's identity.
func (s refSet) String() string {
	keys := slices.SortedFunc(maps.Keys(s), func(a, b objects.Ref) int { return strings.Compare(a.String(), b.String()) })
	var b strings.Builder
	for _, r := range keys {
		fmt.Fprintf(&b, "%s=%s ", r, s[r])
	}
	return b.String()
}

// opKind is a catalog call a history records.
type opKind int

const (
	linkOp opKind = iota
	unlinkOp
	moveOp
)

// histOp is one catalog call as a client made it, and its answer.
type histOp struct {
	kind     opKind
	ref      objects.Ref       // link: the new reference; unlink: the one removed
	key      string            // link: the key of the object linked to
	from, to movepart.TableRef // move
	part     string            // move
	moved    int               // move: how many references it answered it moved
	err      error
}

func (o histOp) String() string {
	var s string
	switch o.kind {
	case linkOp:
		s = fmt.Sprintf("link %s → %s", o.ref, o.key)
	case unlinkOp:
		s = "unlink " + o.ref.String()
	case moveOp:
		s = fmt.Sprintf("move %s/%s to %s", o.from, o.part, o.to)
	}
	switch {
	case o.err != nil:
		return s + ": " + o.err.Error()
	case o.kind == moveOp:
		return fmt.Sprintf("%s: %d moved", s, o.moved)
	}
	return s + ": ok"
}

// apply returns s after o took effect, by the catalog's rules as its
// documentation states them (written out here, not taken from its code),
// or false if o cannot take effect on s.
func (o histOp) apply(s refSet) (refSet, bool) {
	switch o.kind {
	case linkOp:
		if k, ok := s[o.ref]; ok {
			return s, k == o.key // linked again: a retry, nothing changes
		}
		n := maps.Clone(s)
		n[o.ref] = o.key
		return n, true
	case unlinkOp:
		if _, ok := s[o.ref]; !ok {
			return s, false
		}
		n := maps.Clone(s)
		delete(n, o.ref)
		return n, true
	case moveOp:
		if o.from == o.to {
			return s, false
		}
		n, moved := maps.Clone(s), 0
		for r, k := range s {
			if r.Table != o.from || r.Part != o.part {
				continue
			}
			dst := objects.Ref{Table: o.to, Part: r.Part, File: r.File}
			if _, taken := s[dst]; taken {
				return s, false
			}
			delete(n, r)
			n[dst] = k
			moved++
		}
		return n, moved > 0 && (o.err != nil || moved == o.moved)
	}
	panic(o.kind)
}

// refused reports whether err is one of the catalog's refusals: the call
// ended with its transactions decided (none left in doubt).
func refused(err error) bool {
	return errors.Is(err, objects.ErrNoReference) || errors.Is(err, objects.ErrExists) ||
		errors.Is(err, objects.ErrDeletable) || errors.Is(err, objects.ErrUnknownObject)
}

// after reports whether s may be what o's refusal saw: an unlink or a
// move refused for want of a reference found none, a link refused because
// its reference exists found it.
func (o histOp) after(s refSet) bool {
	switch {
	case o.kind == unlinkOp && errors.Is(o.err, objects.ErrNoReference):
		_, ok := s[o.ref]
		return !ok
	case o.kind == linkOp && errors.Is(o.err, objects.ErrExists):
		_, ok := s[o.ref]
		return ok
	case o.kind == moveOp && errors.Is(o.err, objects.ErrNoReference):
		for r := range s {
			if r.Table == o.from && r.Part == o.part {
				return false
			}
		}
	}
	return true
}

// maxStates bounds what a history explains at once: each call of unknown
// outcome can double it.
const maxStates = 1 << 16

// history checks one client's catalog calls, in the order it made them,
// against the references they leave (references no other client
// touches). A call acknowledged took effect once, at its place in the
// order; one refused took effect at most once there (a first attempt
// whose answer was lost) and left what its refusal says; one whose
// outcome is unknown (a timeout, a lost leader) may take effect at any
// later point, or never.
type history struct {
	ops    []histOp
	doubt  []int             // indexes in ops of the calls of unknown outcome
	states map[string]hstate // what the calls so far explain, by identity
	most   int               // the most states explained at once
}

// hstate is one explanation: the references, and which calls of unknown
// outcome may still take effect (open[i] == '1' for doubt[i]).
type hstate struct {
	refs refSet
	open string
}

func (st hstate) id() string { return st.refs.String() + "|" + st.open }

func newHistory(initial refSet) *history {
	st := hstate{refs: initial}
	return &history{states: map[string]hstate{st.id(): st}, most: 1}
}

// add records a call and its answer; the error says the answer has no
// explanation.
func (h *history) add(o histOp) error {
	if err := h.settle(); err != nil {
		return err
	}
	h.ops = append(h.ops, o)
	doubtful := o.err != nil && !refused(o.err)
	if doubtful {
		h.doubt = append(h.doubt, len(h.ops)-1)
	}
	next := map[string]hstate{}
	put := func(st hstate) { next[st.id()] = st }
	for _, st := range h.states {
		switch {
		case doubtful:
			put(hstate{refs: st.refs, open: st.open + "1"})
		case o.err == nil:
			if n, ok := o.apply(st.refs); ok {
				put(hstate{refs: n, open: st.open})
			}
		default: // refused
			if o.after(st.refs) {
				put(st)
			}
			if n, ok := o.apply(st.refs); ok && o.after(n) {
				put(hstate{refs: n, open: st.open})
			}
		}
	}
	if len(next) == 0 {
		return fmt.Errorf("no order of the calls explains the answer of %q; the calls:\n%s", o, h)
	}
	h.states = next
	return nil
}

// settle adds the explanations in which calls of unknown outcome took
// effect since.
func (h *history) settle() error {
	queue := slices.Collect(maps.Values(h.states))
	for len(queue) > 0 {
		st := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for i := range st.open {
			if st.open[i] != '1' {
				continue
			}
			n, ok := h.ops[h.doubt[i]].apply(st.refs)
			if !ok {
				continue
			}
			fired := hstate{refs: n, open: st.open[:i] + "0" + st.open[i+1:]}
			if _, seen := h.states[fired.id()]; !seen {
				h.states[fired.id()] = fired
				queue = append(queue, fired)
			}
		}
		if len(h.states) > maxStates {
			return fmt.Errorf("more than %d explanations of %d calls, %d of unknown outcome: too many to check", maxStates, len(h.ops), len(h.doubt))
		}
	}
	h.most = max(h.most, len(h.states))
	return nil
}

// check reports how got differs from every explanation of the calls (nil
// if one matches): a reference that no explanation lacks is missing
// (acknowledged, never undone), one that none has appeared (never
// attempted, or undone).
func (h *history) check(got refSet) error {
	if err := h.settle(); err != nil {
		return err
	}
	possible := map[objects.Ref]map[string]bool{} // "" for absent
	for r := range got {
		possible[r] = map[string]bool{}
	}
	for _, st := range h.states {
		if maps.Equal(st.refs, got) {
			return nil
		}
		for r := range st.refs {
			if possible[r] == nil {
				possible[r] = map[string]bool{}
			}
		}
	}
	for _, st := range h.states {
		for r := range possible {
			possible[r][st.refs[r]] = true
		}
	}
	var diffs []string
	for _, r := range slices.SortedFunc(maps.Keys(possible), func(a, b objects.Ref) int { return strings.Compare(a.String(), b.String()) }) {
		switch v := got[r]; {
		case possible[r][v]:
		case v == "":
			diffs = append(diffs, fmt.Sprintf("missing: %s (every explanation has it, as one of %v)", r, slices.Sorted(maps.Keys(possible[r]))))
		default:
			diffs = append(diffs, fmt.Sprintf("unexplained: %s → %s (explained: %v; \"\" is none)", r, v, slices.Sorted(maps.Keys(possible[r]))))
		}
	}
	if len(diffs) == 0 {
		diffs = append(diffs, "each reference is explained, but not all of them together")
	}
	return fmt.Errorf("the references left are not what the calls explain (%d explanations):\n  %s\nthe calls:\n%s",
		len(h.states), strings.Join(diffs, "\n  "), h)
}

// String lists the calls, one a line.
func (h *history) String() string {
	var b strings.Builder
	for i, o := range h.ops {
		fmt.Fprintf(&b, "  %3d %s\n", i, o)
	}
	return b.String()
}

// TestHistory checks the checker on histories written by hand: what an
// answer proves, what a call in doubt allows, and what nothing explains.
func TestHistory(t *testing.T) {
	ta, tb := movepart.TableRef{Server: "ch", Database: "db", Table: "a"}, movepart.TableRef{Server: "ch", Database: "db", Table: "b"}
	x, y := ref(ta, "p", "x"), ref(ta, "p", "y")
	link := func(r objects.Ref, key string, err error) histOp {
		return histOp{kind: linkOp, ref: r, key: key, err: err}
	}
	unlink := func(r objects.Ref, err error) histOp { return histOp{kind: unlinkOp, ref: r, err: err} }
	move := func(n int, err error) histOp {
		return histOp{kind: moveOp, from: ta, to: tb, part: "p", moved: n, err: err}
	}
	doubt := &xshard.UnknownOutcomeError{ID: "t"}
	for _, tc := range []struct {
		name string
		ops  []histOp
		ok   []refSet // each explained
		bad  []refSet // each not
	}{
		{"acknowledged", []histOp{link(x, "k", nil), link(y, "k", nil), unlink(x, nil)},
			[]refSet{{y: "k"}}, []refSet{{x: "k", y: "k"}, {}, {y: "j"}}},
		{"in doubt", []histOp{link(x, "k", doubt)},
			[]refSet{{}, {x: "k"}}, []refSet{{x: "j"}, {y: "k"}}},
		{"in doubt, taking effect after a refusal", []histOp{link(x, "k", doubt), unlink(x, objects.ErrNoReference)},
			[]refSet{{}, {x: "k"}}, nil},
		{"refusals", []histOp{link(x, "k", nil), link(x, "j", objects.ErrExists), unlink(y, objects.ErrNoReference)},
			[]refSet{{x: "k"}}, []refSet{{x: "j"}, {}}},
		// A refused unlink of a reference that was there took effect (a
		// first attempt whose answer was lost): the reference is gone.
		{"refused unlink", []histOp{link(x, "k", nil), unlink(x, objects.ErrNoReference)},
			[]refSet{{}}, []refSet{{x: "k"}}},
		{"move", []histOp{link(x, "k", nil), link(y, "j", nil), move(2, nil)},
			[]refSet{{ref(tb, "p", "x"): "k", ref(tb, "p", "y"): "j"}}, []refSet{{x: "k", y: "j"}, {ref(tb, "p", "x"): "k"}}},
		{"move in doubt", []histOp{link(x, "k", nil), move(0, doubt)},
			[]refSet{{x: "k"}, {ref(tb, "p", "x"): "k"}}, []refSet{{x: "k", ref(tb, "p", "x"): "k"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, got := range tc.ok {
				assert.NoError(t, replay(tc.ops).check(got), "%v", got)
			}
			for _, got := range tc.bad {
				assert.Error(t, replay(tc.ops).check(got), "%v", got)
			}
		})
	}
	// Answers that no order explains.
	for _, ops := range [][]histOp{
		{unlink(x, nil)},                       // nothing to unlink
		{link(x, "k", nil), link(x, "j", nil)}, // linked twice to two objects
		{link(x, "k", nil), move(2, nil)},      // one reference moved, two answered
	} {
		h := newHistory(refSet{})
		var err error
		for _, o := range ops {
			if err = h.add(o); err != nil {
				break
			}
		}
		assert.Error(t, err, "%s", h)
	}
}

// replay returns the history of ops from no references.
func replay(ops []histOp) *history {
	h := newHistory(refSet{})
	for _, o := range ops {
		if err := h.add(o); err != nil {
			panic(err)
		}
	}
	return h
}
