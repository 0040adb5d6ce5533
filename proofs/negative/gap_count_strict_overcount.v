(* DELIBERATELY WRONG (must not compile): subcubic_gap's count m - g + 1 for
   a gap with the strict test t < m - g (only m - g tokens): an over-count.
   Negation: Counterexamples.gap_strict_overcount_false. *)
From Coq Require Import List Arith Lia Bool.
From MaxK Require Import Counting Classes.

Theorem gap_count_wrong : forall v n q m c g,
  1 <= n -> q <= m -> m < v -> c <= cmax q m n -> 1 <= g <= m ->
  length (filter (fun t => cls_is q m c t && covered m (seq 0 (m - g)) (tl t)) (seqs v (S n)))
  = choose n c * (m - g + 1) ^ c.
Proof.
  intros v n q m c g Hn Hqm Hmv Hc Hg.
  rewrite class_cover_size; auto.
  - rewrite seq_length. reflexivity.
  - apply seq_NoDup.
  - intros u Hu. apply in_seq in Hu. lia.
Qed.
