(* DELIBERATELY WRONG (must not compile): a merged class M(q, m, i0, g) counted as if the
   positions after i0 drew from A alone, (m - g + 1)^(k-2) — forgetting that they may also
   hold m (spec/rules.md Lemma G5 (c): (m - g + 1)^i0 * (m - g + 2)^(k-2-i0)).
   Negation: Counterexamples.merged_size_without_m_false. *)
From Coq Require Import List Arith Lia Bool.
From MaxK Require Import Counting FamilyGap.

Theorem merged_size_wrong : forall v q m g i0 j, 1 <= g <= m -> q <= m -> m < v ->
  length (filter (member q m g (merged_kinds i0 j)) (seqs v (S (i0 + 1 + j))))
  = (m + 1 - g) ^ (i0 + j).
Proof.
  intros v q m g i0 j Hg Hq Hm.
  rewrite G5c_size by assumption.
  rewrite Nat.pow_add_r. f_equal. f_equal. lia.
Qed.
