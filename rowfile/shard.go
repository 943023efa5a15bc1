package rowfile

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxShards is the largest shard count the five-digit names can express.
const MaxShards = 99999

// ShardName returns the name of shard shard (zero-based) of total:
// PREFIX-SSSSS-of-NNNNN.EXT, five digits each, as the Dataflow templates
// name their files. ext is the extension without the dot ("parquet",
// "jsonl"). It panics on a shard outside [0, total) or a total outside
// [1, MaxShards]: those are programming errors.
func ShardName(prefix string, shard, total int, ext string) string {
	if total < 1 || total > MaxShards || shard < 0 || shard >= total {
		panic(fmt.Sprintf("rowfile: shard %d of %d out of range", shard, total))
	}
	return fmt.Sprintf("%s-%05d-of-%05d.%s", prefix, shard, total, ext)
}

// ParseShardName parses a name ShardName made with this prefix and
// extension; ok is false for any other name.
func ParseShardName(name, prefix, ext string) (shard, total int, ok bool) {
	rest, found := strings.CutPrefix(name, prefix+"-")
	if !found {
		return 0, 0, false
	}
	rest, found = strings.CutSuffix(rest, "."+ext)
	// SSSSS-of-NNNNN
	if !found || len(rest) != 14 || rest[5:9] != "-of-" {
		return 0, 0, false
	}
	s, err1 := strconv.Atoi(rest[:5])
	t, err2 := strconv.Atoi(rest[9:])
	if err1 != nil || err2 != nil || strings.ContainsAny(rest[:5]+rest[9:], "+-") || t < 1 || s >= t {
		return 0, 0, false
	}
	return s, t, true
}

// ErrIncompleteShards is matched (errors.Is) when a set of shards is
// missing some, or names of two different sets are mixed.
var ErrIncompleteShards = errors.New("rowfile: incomplete shard set")

// ErrNoShards is matched (errors.Is) when no shard with the prefix exists.
var ErrNoShards = errors.New("rowfile: no shards")

// ListShards picks, from object names (base names, without directory),
// the complete shard set PREFIX-*-of-N.EXT and returns its names in shard
// order. Names that are not shards of this prefix and extension are
// ignored. It is an error (ErrNoShards) if there is none, and
// (ErrIncompleteShards) if some shard of the set is missing or shards of
// different totals are present (the leftovers of an earlier export with
// another shard count: a reader could not tell which set is current).
func ListShards(names []string, prefix, ext string) ([]string, error) {
	byTotal := map[int][]string{}
	for _, n := range names {
		s, t, ok := ParseShardName(n, prefix, ext)
		if !ok {
			continue
		}
		if byTotal[t] == nil {
			byTotal[t] = make([]string, t)
		}
		byTotal[t][s] = n
	}
	switch len(byTotal) {
	case 0:
		return nil, fmt.Errorf("%w named %s-SSSSS-of-NNNNN.%s", ErrNoShards, prefix, ext)
	case 1:
	default:
		totals := make([]int, 0, len(byTotal))
		for t := range byTotal {
			totals = append(totals, t)
		}
		slices.Sort(totals)
		return nil, fmt.Errorf("%w: %s-*.%s has sets of %v shards mixed; remove the stale ones", ErrIncompleteShards, prefix, ext, totals)
	}
	for t, set := range byTotal {
		var missing []string
		for s, n := range set {
			if n == "" {
				missing = append(missing, ShardName(prefix, s, t, ext))
			}
		}
		if n := len(missing); n > 0 {
			if n > 5 {
				missing = append(missing[:5], fmt.Sprintf("and %d more", n-5))
			}
			return nil, fmt.Errorf("%w: %d of %d shards missing: %s", ErrIncompleteShards, n, t, strings.Join(missing, ", "))
		}
		return set, nil
	}
	panic("unreachable")
}

// MatchShards returns the names that are shards of prefix and ext, of any
// set, in the order given.
func MatchShards(names []string, prefix, ext string) []string {
	var out []string
	for _, n := range names {
		if _, _, ok := ParseShardName(n, prefix, ext); ok {
			out = append(out, n)
		}
	}
	return out
}

// ShardPrefixes returns the distinct prefixes of the names that look like
// shards with extension ext (PREFIX-SSSSS-of-NNNNN.EXT), sorted.
func ShardPrefixes(names []string, ext string) []string {
	seen := map[string]bool{}
	for _, n := range names {
		// The suffix -SSSSS-of-NNNNN.EXT has a fixed length.
		cut := len(n) - len("-00000-of-00000.") - len(ext)
		if cut <= 0 {
			continue
		}
		if _, _, ok := ParseShardName(n, n[:cut], ext); ok {
			seen[n[:cut]] = true
		}
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}
