package statuspage

import (
	"fmt"
	"html/template"
	"strings"
	"time"
)

// funcs are the helpers the templates use.
var funcs = template.FuncMap{
	"key":       FormatKey,
	"startKey":  func(k []byte) string { return boundKey(k, "(table start)") },
	"endKey":    func(k []byte) string { return boundKey(k, "(table end)") },
	"isEscaped": keyNeedsEscape,
	"size":      FormatBytes,
	"hitRate":   HitRate,
	"stamp":     func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"ago":       Ago,
	"stateClass": func(s string) string {
		switch s {
		case StateServing, StateLoading, StateUnloading, StateSplitting, StateUnassigned:
			return "state-" + s
		}
		return "state-other"
	},
}

// FormatKey renders a row key for display: printable ASCII stays as it is,
// a backslash becomes `\\` and every other byte `\xNN`, so any key
// (binary, UTF-8, control bytes) reads unambiguously and no two keys look
// alike. HTML escaping is left to the template.
func FormatKey(k []byte) string {
	if !keyNeedsEscape(k) {
		return string(k)
	}
	var b strings.Builder
	for _, c := range k {
		switch {
		case c == '\\':
			b.WriteString(`\\`)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	return b.String()
}

// keyNeedsEscape reports whether FormatKey changes k.
func keyNeedsEscape(k []byte) bool {
	for _, c := range k {
		if c < 0x20 || c >= 0x7f || c == '\\' {
			return true
		}
	}
	return false
}

// boundKey formats a tablet boundary, naming the open ends.
func boundKey(k []byte, open string) string {
	if len(k) == 0 {
		return open
	}
	return FormatKey(k)
}

// HitRate renders hits/(hits+misses) as a percentage with one decimal, or
// "–" when there were no lookups.
func HitRate(hits, misses uint64) string {
	if hits == 0 && misses == 0 {
		return "–"
	}
	// In floating point: the counters' sum can overflow uint64.
	return fmt.Sprintf("%.1f%%", 100*float64(hits)/(float64(hits)+float64(misses)))
}

// FormatBytes renders a size in binary units: "0 B", "512 B", "1.5 KiB",
// "20.0 MiB".
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		v /= unit
		if v < unit && v > -unit {
			return fmt.Sprintf("%.1f %s", v, u)
		}
	}
	return fmt.Sprintf("%.1f EiB", v/unit)
}

// Ago renders how long before now t was, coarsely: "12s ago", "5m ago",
// "3h ago", "2d ago". A zero t renders as "never"; a t after now as "now".
func Ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	default:
		return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
	}
}
