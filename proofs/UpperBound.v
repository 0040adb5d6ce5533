(* Upper-bound arithmetic (spec/rules.md, preamble "Upper-bound arithmetic",
   checker/numbers.py and the back-ends' up_add / up_minus / up_mul / up_max).
   A carried number xb means "X <= xb".  Rounding up only enlarges xb, so each
   lemma also holds for the rounded result (Rle_trans with the rounding). *)
From Coq Require Import Reals Lra.
Open Scope R_scope.

Lemma ub_add : forall X Y xb yb, X <= xb -> Y <= yb -> X + Y <= xb + yb.
Proof. intros; lra. Qed.

(* X - Y <= xb - y for X <= xb and Y in [y, yb] *)
Lemma ub_minus : forall X Y xb y, X <= xb -> y <= Y -> X - Y <= xb - y.
Proof. intros; lra. Qed.

(* W in [w, wb] with w >= 0:  W X <= wb xb if xb >= 0, and W X <= w xb if xb < 0 *)
Theorem ub_mul : forall W X w wb xb, 0 <= w -> w <= W <= wb -> X <= xb ->
  W * X <= (if Rle_dec 0 xb then wb * xb else w * xb).
Proof.
  intros W X w wb xb Hw [H1 H2] Hx.
  assert (W * X <= W * xb) by (apply Rmult_le_compat_l; lra).
  destruct (Rle_dec 0 xb) as [Hxb|Hxb].
  - assert (W * xb <= wb * xb) by (apply Rmult_le_compat_r; lra). lra.
  - assert (W * xb <= w * xb) by nra. lra.
Qed.

Lemma ub_max : forall X Y xb yb, X <= xb -> Y <= yb -> Rmax X Y <= Rmax xb yb.
Proof. intros; unfold Rmax; repeat destruct (Rle_dec _ _); lra. Qed.

(* A rounded-up result: if the exact bound is <= its rounding, the rounding bounds X. *)
Lemma ub_round : forall X xb r, X <= xb -> xb <= r -> X <= r.
Proof. intros; lra. Qed.

(* "X < 0 is confirmed when the upper endpoint of X's enclosure is < 0." *)
Lemma ub_confirms_neg : forall X xb, X <= xb -> xb < 0 -> X < 0.
Proof. intros; lra. Qed.
