package advertise

import (
	"net"
	"strings"
	"testing"
)

func TestAddr(t *testing.T) {
	tcp := func(s string) net.Addr {
		a, err := net.ResolveTCPAddr("tcp", s)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, c := range []struct {
		advertise, listen, want, err string
	}{
		{"", "127.0.0.1:8086", "127.0.0.1:8086", ""},
		{"", "10.0.0.5:41000", "10.0.0.5:41000", ""},
		{"", "0.0.0.0:8086", "", "every interface"},
		{"", "[::]:8086", "", "every interface"},
		{"db1.example:9000", "0.0.0.0:8086", "db1.example:9000", ""},
		{"db1.example", "0.0.0.0:8086", "db1.example:8086", ""},
		{"db1.example:0", "0.0.0.0:41234", "db1.example:41234", ""},
		{"10.0.0.5", "[::]:8086", "10.0.0.5:8086", ""},
		{"[fd00::5]:7000", "[::]:8086", "[fd00::5]:7000", ""},
		{"[fd00::5]", "[::]:8086", "[fd00::5]:8086", ""},
		{"fd00::5", "[::]:8086", "[fd00::5]:8086", ""},
		{"0.0.0.0:8086", "0.0.0.0:8086", "", "wildcard"},
		{":8086", "0.0.0.0:8086", "", "wildcard"},
		{"[::]", "0.0.0.0:8086", "", "wildcard"},
	} {
		got, err := Addr(c.advertise, tcp(c.listen))
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("Addr(%q, %s) = %q, %v; want an error saying %q", c.advertise, c.listen, got, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("Addr(%q, %s) = %q, %v; want %q", c.advertise, c.listen, got, err, c.want)
		}
	}
}
