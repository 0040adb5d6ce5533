(* DELIBERATELY WRONG (must not compile): the tokens 0..m-g counted as m - g
   (the paper's Alg. 4 count, stated as the exact size of the class).
   Negation: Counterexamples.gap_count_m_minus_g_false. *)
From Coq Require Import List Arith Lia Bool.
From MaxK Require Import Counting Classes SubcubicGap.

Theorem gap_count_wrong : forall v n q m c g,
  1 <= n -> q <= m -> m < v -> c <= cmax q m n -> 1 <= g <= m ->
  length (filter (fun t => cls_is q m c t && covered m (gap_tokens m g) (tl t)) (seqs v (S n)))
  = choose n c * (m - g) ^ c.
Proof.
  intros v n q m c g Hn Hqm Hmv Hc Hg.
  rewrite gap_class_count by assumption.
  f_equal. f_equal. lia.
Qed.
