// Package netguard classifies network destinations for webhooks (SSRF
// guard): loopback, private, link-local (cloud metadata at
// 169.254.169.254), unspecified, multicast and reserved addresses are
// refused unless allow-listed (NOTIFLOW_WEBHOOK_ALLOW). The dispatcher dials
// through a Guard; the scheduler checks a target's webhook_url with the
// same Guard when the target is created. One implementation, so both
// agree on what is refused.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// ErrForbiddenAddress marks a webhook destination the SSRF guard refused.
var ErrForbiddenAddress = errors.New("webhook destination refused")

// ForbiddenAddressError says which address was refused and why.
type ForbiddenAddressError struct {
	Addr   string
	Reason string
}

func (e *ForbiddenAddressError) Error() string {
	return fmt.Sprintf("%s: %s is a %s address (allow it with NOTIFLOW_WEBHOOK_ALLOW)", ErrForbiddenAddress, e.Addr, e.Reason)
}

// Is makes errors.Is(err, ErrForbiddenAddress) true.
func (e *ForbiddenAddressError) Is(target error) bool { return target == ErrForbiddenAddress }

// reserved are ranges refused besides what netip classifies: "this
// network", carrier-grade NAT, IETF protocol assignments, benchmarking,
// reserved/broadcast and NAT64 (which can embed private IPv4 addresses).
var reserved = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
}

// Guard keeps webhooks away from internal addresses (SSRF): it refuses
// loopback, private, link-local, unspecified, multicast and reserved
// addresses unless they are in the allow list. The check runs on the
// address actually being dialed (in the dialer's Control hook, before
// connect), so a host name that resolves, or re-resolves (DNS rebinding),
// to an internal address is refused too. It is safe for concurrent use.
type Guard struct {
	nets  []netip.Prefix
	hosts map[string]bool
	// guarded dials with the address check; open dials allow-listed host
	// names without it.
	guarded, open *net.Dialer
}

// NewGuard builds a guard from allow entries: CIDRs ("10.1.0.0/16"), IP
// addresses or host names (matched case-insensitively against the URL's
// host; any address they resolve to is then allowed).
func NewGuard(allow []string) (*Guard, error) {
	g := &Guard{hosts: map[string]bool{}}
	for _, a := range allow {
		a = strings.TrimSpace(a)
		switch {
		case a == "":
		case strings.Contains(a, "/"):
			p, err := netip.ParsePrefix(a)
			if err != nil {
				return nil, fmt.Errorf("allow entry %q: %w", a, err)
			}
			g.nets = append(g.nets, p.Masked())
		default:
			if ip, err := netip.ParseAddr(a); err == nil {
				g.nets = append(g.nets, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
				continue
			}
			g.hosts[strings.ToLower(strings.TrimSuffix(a, "."))] = true
		}
	}
	g.guarded = &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: g.control}
	g.open = &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return g, nil
}

// CheckIP returns a *ForbiddenAddressError when ip may not be called.
func (g *Guard) CheckIP(ip netip.Addr) error {
	ip = ip.Unmap().WithZone("")
	for _, p := range g.nets {
		if p.Contains(ip) {
			return nil
		}
	}
	reason := ""
	switch {
	case !ip.IsValid():
		reason = "invalid"
	case ip.IsUnspecified():
		reason = "unspecified"
	case ip.IsLoopback():
		reason = "loopback"
	case ip.IsPrivate():
		reason = "private"
	case ip.IsLinkLocalUnicast():
		reason = "link-local"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		reason = "multicast"
	default:
		for _, p := range reserved {
			if p.Contains(ip) {
				reason = "reserved"
				break
			}
		}
	}
	if reason == "" {
		return nil
	}
	return &ForbiddenAddressError{Addr: ip.String(), Reason: reason}
}

// CheckHost refuses a URL host that is an IP literal the guard forbids,
// before anything is dialed. Host names pass here and are checked when
// their addresses are dialed.
func (g *Guard) CheckHost(host string) error {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if g.hosts[h] {
		return nil
	}
	if ip, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return g.CheckIP(ip)
	}
	return nil
}

// DialContext dials address (host:port as in the URL) for the HTTP
// transport, refusing forbidden addresses before connecting.
func (g *Guard) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", address, err)
	}
	if g.hosts[strings.ToLower(strings.TrimSuffix(host, "."))] {
		return g.open.DialContext(ctx, network, address)
	}
	return g.guarded.DialContext(ctx, network, address)
}

// control runs after the socket is created and before it connects, with
// the resolved address.
func (g *Guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &ForbiddenAddressError{Addr: address, Reason: "unparseable"}
	}
	return g.CheckIP(ap.Addr())
}

// ValidAllowEntry reports whether s is a valid allow entry: a CIDR, an IP
// address or a host name.
func ValidAllowEntry(s string) bool {
	if strings.Contains(s, "/") {
		_, err := netip.ParsePrefix(s)
		return err == nil
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	if s == "" || len(s) > 253 {
		return false
	}
	for _, r := range s {
		if !(r == '.' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// Resolver looks host names up (net.DefaultResolver does).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckResolved is the check made before a destination is stored (the
// scheduler's, at target creation): an allow-listed host name passes; an
// IP literal is checked as CheckIP does; a host name is resolved with r
// and refused when every address it resolves to is forbidden (the first
// one's error is returned). A name that does not resolve (now) passes:
// the dial-time check still guards every send. ctx bounds the lookup.
func (g *Guard) CheckResolved(ctx context.Context, r Resolver, host string) error {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if g.hosts[h] {
		return nil
	}
	if ip, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return g.CheckIP(ip)
	}
	addrs, err := r.LookupNetIP(ctx, "ip", h)
	if err != nil || len(addrs) == 0 {
		return nil
	}
	var first error
	for _, a := range addrs {
		err := g.CheckIP(a)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	return first
}
