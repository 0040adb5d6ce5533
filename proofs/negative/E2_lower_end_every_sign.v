(* DELIBERATELY WRONG (must not compile): Lemma E2 with the lower weight
   w^- for every sign of x_bar, proved by the script of the right lemma.
   Its negation is Counterexamples.E2_lower_end_every_sign_false. *)
From Coq Require Import Reals Lra.
From MaxK Require Import Sums Exact.
Open Scope R_scope.

Theorem E2_wrong : forall (k : nat) (w wlo whi x xb : nat -> R),
  (forall i, (i < k)%nat -> 0 <= wlo i /\ wlo i <= w i <= whi i) ->
  (forall i, (i < k)%nat -> x i <= xb i) ->
  sumR (fun i => wlo i * xb i) k < 0 ->
  sumR (fun i => w i * x i) k < 0.
Proof.
  intros k w wlo whi x xb Hw Hx HT.
  apply Rle_lt_trans with (sumR (fun i => wlo i * xb i) k); [|assumption].
  apply sumR_le. intros i Hi. destruct (Hw i Hi) as [H0 [H1 H2]].
  specialize (Hx i Hi).
  (* the right lemma splits on the sign of xb i here; with w^- for both: *)
  nra.
Qed.
