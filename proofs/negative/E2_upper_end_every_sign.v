(* DELIBERATELY WRONG (must not compile): Lemma E2 with the upper weight
   w^+ for every sign of x_bar.  Negation: Counterexamples.E2_upper_end_every_sign_false. *)
From Coq Require Import Reals Lra.
From MaxK Require Import Sums Exact.
Open Scope R_scope.

Theorem E2_wrong : forall (k : nat) (w wlo whi x xb : nat -> R),
  (forall i, (i < k)%nat -> 0 <= wlo i /\ wlo i <= w i <= whi i) ->
  (forall i, (i < k)%nat -> x i <= xb i) ->
  sumR (fun i => whi i * xb i) k < 0 ->
  sumR (fun i => w i * x i) k < 0.
Proof.
  intros k w wlo whi x xb Hw Hx HT.
  apply Rle_lt_trans with (sumR (fun i => whi i * xb i) k); [|assumption].
  apply sumR_le. intros i Hi. destruct (Hw i Hi) as [H0 [H1 H2]].
  specialize (Hx i Hi).
  nra.
Qed.
