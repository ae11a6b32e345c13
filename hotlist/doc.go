// Package hotlist is a trending list ("hot list") fed by a Kafka topic of
// item events and kept in Redis.
package hotlist
