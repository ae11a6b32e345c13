package idgen_test

import (
	"fmt"

	"github.com/casebook-dev/casebook/idgen"
)

func ExampleEncodeBase62() {
	s := idgen.EncodeBase62(1_000_000)
	n, _ := idgen.DecodeBase62(s)
	_, err := idgen.DecodeBase62("no-dash")
	fmt.Println(s, n)
	fmt.Println(err)
	// Output:
	// 4C92 1000000
	// idgen: invalid base62: character '-' at 2
}

func ExampleShortCodes() {
	codes, _ := idgen.NewShortCodes(nil, idgen.ShortCodeConfig{Length: 7, Key: 0x5eed})
	for counter := uint64(1); counter <= 3; counter++ {
		code, _ := codes.Encode(counter)
		back, _ := codes.Decode(code)
		fmt.Println(len(code), back, code != fmt.Sprint(counter))
	}
	// Output:
	// 7 1 true
	// 7 2 true
	// 7 3 true
}

func ExampleGenes() {
	genes := idgen.Genes{Bits: 8} // up to 256 tables
	userGene := genes.Of("user-42")
	orderID, _ := genes.Make(1001, userGene) // 1001 from a segment counter
	fmt.Println(genes.Gene(orderID) == userGene, genes.Base(orderID))
	// Output: true 1001
}
