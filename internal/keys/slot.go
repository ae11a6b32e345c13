package keys

import "strings"

// SlotCount is the number of hash slots in a Redis Cluster.
const SlotCount = 16384

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the hash
// tag when the key has a non-empty one, else of the whole key, modulo 16384.
// It follows the algorithm in the Redis Cluster specification.
func Slot(key string) int {
	return int(crc16(hashTag(key)) % SlotCount)
}

// hashTag returns the part of key that Redis Cluster hashes.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	closing := strings.IndexByte(key[open+1:], '}')
	if closing <= 0 { // no '}' or an empty "{}": the whole key is hashed
		return key
	}
	return key[open+1 : open+1+closing]
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), bit by bit:
// slot computation is not on any hot path worth a lookup table.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
