package netguard

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestGuardCheckIP(t *testing.T) {
	t.Parallel()
	g, err := NewGuard([]string{"10.9.0.0/16", "192.168.1.7", "hooks.internal"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give string
		want string // "" = allowed, else the reason
	}{
		{"93.184.216.34", ""},
		{"2606:4700::1111", ""},
		{"10.0.0.1", "private"},
		{"10.9.3.4", ""},
		{"172.16.0.1", "private"},
		{"192.168.1.7", ""},
		{"192.168.1.8", "private"},
		{"127.0.0.1", "loopback"},
		{"::1", "loopback"},
		{"169.254.169.254", "link-local"},
		{"fe80::1", "link-local"},
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"224.0.0.1", "multicast"},
		{"ff02::1", "multicast"},
		{"fd00::1", "private"},
		{"100.64.0.1", "reserved"},
		{"::ffff:10.0.0.1", "private"},
		{"64:ff9b::a00:1", "reserved"},
		{"255.255.255.255", "reserved"},
	}
	for _, tt := range tests {
		err := g.CheckIP(netip.MustParseAddr(tt.give))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: refused (%v), want allowed", tt.give, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want refused as %s", tt.give, err, tt.want)
		}
	}
	if err := g.CheckHost("hooks.internal"); err != nil {
		t.Errorf("allow-listed host refused: %v", err)
	}
}

func TestCheckResolved(t *testing.T) {
	t.Parallel()
	strict, err := NewGuard(nil)
	if err != nil {
		t.Fatal(err)
	}
	open, err := NewGuard([]string{"127.0.0.0/8", "::1", "10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	named, err := NewGuard([]string{"localhost"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give       string
		g          *Guard
		wantReason string // "" = allowed
	}{
		{"169.254.169.254", strict, "link-local"},
		{"10.1.2.3", strict, "private"},
		{"[::1]", strict, "loopback"},
		{"localhost", strict, "loopback"}, // resolves to 127.0.0.1 (and ::1) only
		{"localhost", open, ""},
		{"localhost", named, ""},
		{"10.1.2.3", open, ""},
		{"93.184.216.34", strict, ""},
		{"no-such-host.invalid", strict, ""}, // unresolvable: left to the dial-time check
	}
	for _, tt := range tests {
		err := tt.g.CheckResolved(context.Background(), net.DefaultResolver, tt.give)
		switch {
		case tt.wantReason == "" && err != nil:
			t.Errorf("%s: refused (%v), want allowed", tt.give, err)
		case tt.wantReason != "" && (err == nil || !strings.Contains(err.Error(), tt.wantReason)):
			t.Errorf("%s: %v, want refused as %s", tt.give, err, tt.wantReason)
		}
	}
}
