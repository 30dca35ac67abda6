package testenv

import (
	"fmt"
	"net"
	"testing"
)

func TestFreePortsAreDistinctBindableAndBelowEphemeralRange(t *testing.T) {
	ports := FreePorts(t, 20)
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d handed out twice: %v", p, ports)
		}
		seen[p] = true
		if p < portRangeLow || p >= ephemeralLow() {
			t.Errorf("port %d outside [%d, %d)", p, portRangeLow, ephemeralLow())
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d not bindable: %v", p, err)
		}
		l.Close()
	}
}

func TestFreePortIsNotHandedOutAgainWhileReserved(t *testing.T) {
	first := FreePorts(t, 50)
	second := FreePorts(t, 50)
	reserved := map[int]bool{}
	for _, p := range first {
		reserved[p] = true
	}
	for _, p := range second {
		if reserved[p] {
			t.Fatalf("port %d handed out while still reserved", p)
		}
	}
	if p := FreePort(t); reserved[p] {
		t.Fatalf("FreePort returned reserved port %d", p)
	}
}
