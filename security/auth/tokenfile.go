package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// ParseTokenFile parses a static token file: one token a line,
//
//	<token> <principal> [group,group,...]
//
// fields separated by spaces or tabs; blank lines and lines starting with
// # are ignored. A token must be at least 16 characters; a token listed
// twice is an error (naming the line, never the token).
func ParseTokenFile(r io.Reader) (map[string]Identity, error) {
	out := map[string]Identity{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("line %d: want <token> <principal> [groups]", n)
		}
		if len(f[0]) < 16 {
			return nil, fmt.Errorf("line %d: the token is shorter than 16 characters", n)
		}
		if _, dup := out[f[0]]; dup {
			return nil, fmt.Errorf("line %d: the token is listed twice", n)
		}
		id := Identity{Principal: f[1], Method: "token"}
		if len(f) == 3 {
			id.Groups = strings.Split(f[2], ",")
		}
		out[f[0]] = id
	}
	return out, sc.Err()
}

// tokenFile is a token file read again when its modification time or size
// changes. Tokens are kept by SHA-256, compared in constant time.
type tokenFile struct {
	path  string
	check time.Duration

	mu      sync.Mutex
	ids     map[[32]byte]Identity
	mod     time.Time
	size    int64
	checked time.Time
}

func openTokenFile(path string, check time.Duration) (*tokenFile, error) {
	t := &tokenFile{path: path, check: check}
	if err := t.load(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *tokenFile) load() error {
	st, err := os.Stat(t.path)
	if err != nil {
		return fmt.Errorf("auth: token file: %w", err)
	}
	b, err := os.ReadFile(t.path)
	if err != nil {
		return fmt.Errorf("auth: token file: %w", err)
	}
	m, err := ParseTokenFile(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("auth: token file %s: %w", t.path, err)
	}
	ids := make(map[[32]byte]Identity, len(m))
	for tok, id := range m {
		ids[sha256.Sum256([]byte(tok))] = id
	}
	t.ids, t.mod, t.size = ids, st.ModTime(), st.Size()
	return nil
}

// lookup returns the identity of token, reloading the file first if it
// changed; a file that became unreadable or invalid keeps the last good
// tokens (and logs why).
func (t *tokenFile) lookup(token string) (Identity, bool) {
	t.mu.Lock()
	if now := time.Now(); now.Sub(t.checked) >= t.check {
		t.checked = now
		if st, err := os.Stat(t.path); err == nil && (!st.ModTime().Equal(t.mod) || st.Size() != t.size) {
			if err := t.load(); err != nil {
				slog.Warn("auth: keeping the previous tokens", "err", err)
			} else {
				slog.Info("auth: token file reloaded", "file", t.path, "tokens", len(t.ids))
			}
		}
	}
	ids := t.ids
	t.mu.Unlock()
	// Keyed by the token's hash: a lookup's timing says nothing useful
	// about the tokens.
	id, ok := ids[sha256.Sum256([]byte(token))]
	if ok {
		return id, true
	}
	return Identity{}, false
}
