// Package feed is a news feed: a social graph, posts, and timelines built by
// push (fan-out on write through Kafka), pull (celebrities, merged at read)
// and both at once, with cursor paging and deletes.
//
// See the package's README section in this file's later revisions for the
// guarantees.
package feed
