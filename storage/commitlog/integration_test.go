//go:build integration

package commitlog

import (
	"testing"

	"github.com/tabuladb/tabula/storage/blob"
	"github.com/tabuladb/tabula/storage/blob/blobtest"
)

// TestS3 runs the object-mode tests against a real S3 server (MinIO, started
// by the project's test command; blobtest.NewS3 fails the test when its
// environment is missing). Each subtest gets its own bucket.
func TestS3(t *testing.T) {
	s3 := objectMode("s3", func(t testing.TB) blob.Store { return blobtest.NewS3(t) })
	for name, test := range map[string]func(*testing.T, logMode){
		"RoundTrip":        testRoundTrip,
		"ReplayFromMiddle": testReplayFromMiddle,
		"SegmentRollover":  testSegmentRollover,
		"Truncate":         testTruncate,
		"GroupCommit":      testGroupCommit,
		"SortedReplay":     testSortedReplayMatchesLog,
		"SortCorruption":   testSortFailsOnCorruption,
		"SortedMissing":    testReplaySortedMissingSegment,
	} {
		t.Run(name, func(t *testing.T) { test(t, s3) })
	}
}
