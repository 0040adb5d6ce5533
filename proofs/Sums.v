(* Finite sums over the reals: sumR f n = f 0 + ... + f (n-1).
   Only the standard library (Reals, Lra, Lia). *)
From Coq Require Import Reals Lra Lia.
Open Scope R_scope.

Fixpoint sumR (f : nat -> R) (n : nat) : R :=
  match n with
  | O => 0
  | S n' => sumR f n' + f n'
  end.

Lemma sumR_ext : forall f g n,
  (forall i, (i < n)%nat -> f i = g i) -> sumR f n = sumR g n.
Proof.
  intros f g n H; induction n as [|n IH]; simpl; [reflexivity|].
  rewrite IH by (intros; apply H; lia). rewrite H by lia. reflexivity.
Qed.

Lemma sumR_le : forall f g n,
  (forall i, (i < n)%nat -> f i <= g i) -> sumR f n <= sumR g n.
Proof.
  intros f g n H; induction n as [|n IH]; simpl; [lra|].
  assert (sumR f n <= sumR g n) by (apply IH; intros; apply H; lia).
  assert (f n <= g n) by (apply H; lia). lra.
Qed.

Lemma sumR_plus : forall f g n,
  sumR (fun i => f i + g i) n = sumR f n + sumR g n.
Proof. intros f g n; induction n; simpl; [lra|]. rewrite IHn; lra. Qed.

Lemma sumR_minus : forall f g n,
  sumR (fun i => f i - g i) n = sumR f n - sumR g n.
Proof. intros f g n; induction n; simpl; [lra|]. rewrite IHn; lra. Qed.

Lemma sumR_scal_l : forall a f n,
  sumR (fun i => a * f i) n = a * sumR f n.
Proof. intros a f n; induction n; simpl; [lra|]. rewrite IHn; lra. Qed.

Lemma sumR_scal_r : forall a f n,
  sumR (fun i => f i * a) n = sumR f n * a.
Proof. intros a f n; induction n; simpl; [lra|]. rewrite IHn; lra. Qed.

Lemma sumR_div_r : forall a f n,
  sumR (fun i => f i / a) n = sumR f n / a.
Proof. intros a f n; unfold Rdiv; apply sumR_scal_r. Qed.

Lemma sumR_const : forall a n, sumR (fun _ => a) n = INR n * a.
Proof.
  intros a n; induction n; simpl sumR; [simpl; lra|].
  rewrite IHn, S_INR; lra.
Qed.

Lemma sumR_nonneg : forall f n,
  (forall i, (i < n)%nat -> 0 <= f i) -> 0 <= sumR f n.
Proof.
  intros f n H; induction n; simpl; [lra|].
  assert (0 <= sumR f n) by (apply IHn; intros; apply H; lia).
  assert (0 <= f n) by (apply H; lia). lra.
Qed.

Lemma sumR_pos : forall f n,
  (0 < n)%nat -> (forall i, (i < n)%nat -> 0 < f i) -> 0 < sumR f n.
Proof.
  intros f n Hn H; destruct n as [|n]; [lia|]; simpl.
  assert (0 <= sumR f n) by (apply sumR_nonneg; intros; left; apply H; lia).
  assert (0 < f n) by (apply H; lia). lra.
Qed.

(* Splitting a sum along a predicate on positions (a "placement"). *)
Lemma sumR_split : forall (p : nat -> bool) f n,
  sumR f n = sumR (fun i => if p i then f i else 0) n
           + sumR (fun i => if p i then 0 else f i) n.
Proof.
  intros p f n; induction n; simpl; [lra|].
  rewrite IHn; destruct (p n); lra.
Qed.

Lemma sumR_if : forall (p : nat -> bool) a b n,
  sumR (fun i => if p i then a i else b i) n
  = sumR (fun i => if p i then a i else 0) n + sumR (fun i => if p i then 0 else b i) n.
Proof.
  intros p a b n; induction n; simpl; [lra|].
  rewrite IHn; destruct (p n); lra.
Qed.
