(* DELIBERATELY WRONG (must not compile): Lemma 20 with a_k in place of
   |a_k| (the one-sided slip of rules.md's "Subtleties" (1)), proved by the
   script of the right lemma.  Negation: Counterexamples.lemma20_no_abs_false. *)
From Coq Require Import Reals Lra Lia.
From MaxK Require Import Sums Rowdiff.
Open Scope R_scope.

Theorem lemma20_wrong : forall a B h c t,
  (forall k, (k < h)%nat -> range_le (B k) c (t k)) ->
  range_le (vecmat a B h) c (sumR (fun k => a k * t k) h).
Proof.
  intros a B h c t Ht i j Hi Hj. unfold vecmat. rewrite <- sumR_minus.
  apply sumR_le. intros k Hk.
  assert (H1 := Ht k Hk i j Hi Hj). assert (H2 := Ht k Hk j i Hj Hi).
  replace (a k * B k i - a k * B k j) with (a k * (B k i - B k j)) by ring.
  destruct (Rle_dec 0 (a k)).
  - apply Rmult_le_compat_l; lra.
  - nra.
Qed.
