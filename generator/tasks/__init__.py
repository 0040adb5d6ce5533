"""Demo tasks for overwhelm certificates (spec/overwhelm.md): models of the
checker's class (one layer, one head, attention only, learned positions)
trained so that the output at *every* position is meaningful, because an
overwhelm theorem places its query token at a position that depends on the
length of the free string."""
