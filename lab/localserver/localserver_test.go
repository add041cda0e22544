package localserver

import "testing"

// Ports come from below the ephemeral range, where neither the kernel's
// choice for an outgoing connection nor another process's bind to port 0
// can take them before the server binds, and never twice from one process.
func TestFreePortBelowEphemeralRangeAndUnique(t *testing.T) {
	hi := ephemeralLow()
	seen := map[int]bool{}
	for range 500 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p < portFloor || p >= hi {
			t.Fatalf("port %d outside [%d, %d)", p, portFloor, hi)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
	}
}

// A Redis Cluster node also listens on its port + 10000 (the cluster bus):
// that port too must be free and below the ephemeral range.
func TestClusterPortLeavesRoomForTheBus(t *testing.T) {
	hi := ephemeralLow()
	for range 200 {
		p, err := freePort(clusterBusOffset)
		if err != nil {
			t.Fatal(err)
		}
		if p < portFloor || p+clusterBusOffset >= hi {
			t.Fatalf("port %d: bus %d outside [%d, %d)", p, p+clusterBusOffset, portFloor, hi)
		}
		if q, err := FreePort(); err != nil || q == p+clusterBusOffset {
			t.Fatalf("FreePort gave %d (err %v), the bus port of %d", q, err, p)
		}
	}
}
