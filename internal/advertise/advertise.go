// Package advertise decides the address a cluster process is known by —
// registered in Consul, named in METADATA, dialed by the other processes
// and checked against their TLS certificates — from the address it listens
// on and the one it was told to advertise. The two differ when a process
// listens on every interface (0.0.0.0, [::]) or behind address
// translation; a wildcard is no address to dial, and no certificate names
// it.
package advertise

import (
	"fmt"
	"net"
)

// Addr returns the address to advertise for a process listening at
// listener: advertise when it is set (host:port; a port of 0, or none,
// takes the listener's port), else the listener's own address. It fails
// when the result would be a wildcard host, or advertise is malformed.
func Addr(advertise string, listener net.Addr) (string, error) {
	listenHost, listenPort, err := net.SplitHostPort(listener.String())
	if err != nil {
		return "", fmt.Errorf("listen address %q: %w", listener, err)
	}
	if advertise == "" {
		if Wildcard(listenHost) {
			return "", fmt.Errorf("the listen address %s is every interface, which other processes cannot dial and no certificate names: set the address to advertise (--advertise-addr HOST[:PORT])", listener)
		}
		return listener.String(), nil
	}
	host, port, err := net.SplitHostPort(advertise)
	if err != nil {
		// A bare host: the listener's port.
		host, port = advertise, ""
		if ip := net.ParseIP(advertise); ip == nil && net.ParseIP(trimBrackets(advertise)) != nil {
			host = trimBrackets(advertise)
		}
	}
	if host == "" || Wildcard(host) {
		return "", fmt.Errorf("advertise address %q: want a host other processes can dial, not a wildcard", advertise)
	}
	if port == "" || port == "0" {
		port = listenPort
	}
	return net.JoinHostPort(host, port), nil
}

// Wildcard reports whether host means every interface: empty, 0.0.0.0 or
// [::].
func Wildcard(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(trimBrackets(host))
	return ip != nil && ip.IsUnspecified()
}

func trimBrackets(s string) string {
	if len(s) >= 2 && s[0] == '[' && s[len(s)-1] == ']' {
		return s[1 : len(s)-1]
	}
	return s
}
