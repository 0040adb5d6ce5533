(* Rule cubic (spec/rules.md section "Rule cubic", checker/rules/cubic.py):
   Lemmas 1-4, the class argument, and the closed-form count N.
   Only the standard library. *)
From Coq Require Import Reals Lra Lia List Bool Arith.
From MaxK Require Import Sums Softmax Counting Classes.
Import ListNotations.
Open Scope R_scope.

(* ------------------------------------------------------------------------ *)
(* Part 1: the count.  The cover of hints (good, z) is the set of sequences *)
(* of class (q, m, c) with c >= 1 whose non-query tokens below m lie in     *)
(* good q m c, or with c = 0 and z q m = true.                              *)

Definition cover_pred (good : nat -> nat -> nat -> list nat) (z : nat -> nat -> bool)
  (t : list nat) : bool :=
  let m := list_max t in
  let q := hd 0%nat t in
  let c := count_lt m (tl t) in
  if (c =? 0)%nat then z q m else covered m (good q m c) (tl t).

(* N = sum_m sum_{q <= m} [ z_{q,m} + sum_{c=1}^{cmax} C(k-1, c) |G_{q,m,c}|^c ] *)
Definition cubic_N (v n : nat) (good : nat -> nat -> nat -> list nat) (z : nat -> nat -> bool) : nat :=
  list_sum (map (fun m =>
    list_sum (map (fun q =>
      list_sum (map (fun c =>
        if (c =? 0)%nat then (if z q m then 1 else 0)%nat
        else (choose n c * length (good q m c) ^ c)%nat)
        (seq 0 (S (cmax q m n)))))
      (seq 0 (S m))))
    (seq 0 v)).

Lemma cls_is_keys : forall q m c t, cls_is q m c t = true ->
  list_max t = m /\ hd 0%nat t = q /\ count_lt m (tl t) = c.
Proof.
  intros q m c t H. unfold cls_is in H. apply andb_true_iff in H. destruct H as [H1 H].
  apply andb_true_iff in H. destruct H as [H2 H3]. apply Nat.eqb_eq in H1, H2, H3.
  rewrite H1 in H3. auto.
Qed.

(** The closed form of rule cubic's count: the cover has exactly N elements.
    Hypotheses = parse_hints's validation: each good set is a set (bitmask)
    of tokens < m. *)
Theorem cubic_count : forall v n good z, (1 <= n)%nat ->
  (forall q m c, NoDup (good q m c)) ->
  (forall q m c u, In u (good q m c) -> (u < m)%nat) ->
  length (filter (cover_pred good z) (seqs v (S n))) = cubic_N v n good z.
Proof.
  intros v n good z Hn HND HG. rewrite (classes_partition v n _ Hn). unfold cubic_N.
  f_equal. apply map_ext_in. intros m Hm. apply in_seq in Hm.
  f_equal. apply map_ext_in. intros q Hq. apply in_seq in Hq.
  f_equal. apply map_ext_in. intros c Hc. apply in_seq in Hc.
  rewrite (filter_ext_in' _ _ (fun t => cls_is q m c t &&
              (if (c =? 0)%nat then z q m else covered m (good q m c) (tl t)))).
  2: { intros t _. destruct (cls_is q m c t) eqn:E; [|reflexivity].
       destruct (cls_is_keys q m c t E) as [H1 [H2 H3]]. unfold cover_pred.
       rewrite H1, H2, H3. reflexivity. }
  destruct (Nat.eqb_spec c 0) as [->|Hc0].
  - destruct (z q m).
    + rewrite (filter_ext_in' _ _ (cls_is q m 0)) by (intros; apply andb_true_r).
      rewrite class_size by lia. rewrite choose_0. reflexivity.
    + rewrite (filter_ext_in' _ _ (fun _ => false)) by (intros; apply andb_false_r).
      clear. induction (seqs v (S n)); simpl; auto.
  - apply class_cover_size; try lia. apply HND. intros u Hu; apply (HG q m c u Hu).
Qed.

(* ------------------------------------------------------------------------ *)
(* Part 2: the class argument over the reals, for one query q and max m.    *)

Section CubicClass.

Variable v n : nat.           (* d_vocab; n = k - 1 non-query positions      *)
Variable q m : nat.           (* the query token and the max, q <= m         *)
Variable beta : nat -> R.     (* beta i = exp(EQKP[q, i]), i < n             *)
Variable bq : R.              (* beta_{k-1} = exp(EQKP[q, k-1])              *)
Variable e : nat -> R.        (* e t = exp(EQKE[q, t])                       *)
Variable EU : nat -> R.       (* row q of EU                                 *)
Variable EVOU : nat -> nat -> R.
Variable PVOU : nat -> nat -> R.  (* PVOU i o, i <= n; i = n the query position *)
Variable Dp : nat -> R.       (* the checker's dp_max[m]                     *)

Hypothesis beta_pos : forall i, (i < n)%nat -> 0 < beta i.
Hypothesis bq_pos : 0 < bq.
Hypothesis e_pos : forall t, 0 < e t.
(* dp_max[m][o] >= PVOU[i, o] - PVOU[i, m] for every non-query position i *)
Hypothesis Dp_ge : forall i o, (i < n)%nat -> PVOU i o - PVOU i m <= Dp o.

(* x_i(o) of the sign form when position i holds token u *)
Definition x (i u o : nat) : R := (EU o - EU m) + (EVOU u o - EVOU u m) + (PVOU i o - PVOU i m).
Definition D (o : nat) : R := EU o - EU m + Dp o.
Definition X (u o : nat) : R := D o + (EVOU u o - EVOU u m).
Definition Y (o : nat) : R := x n q o.
Definition B : R := sumR beta n.

(* Sigma_i w_i x_i(o) for non-query tokens tok 0 .. tok (n-1) and query q *)
Definition Sigma (tok : nat -> nat) (o : nat) : R :=
  sumR (fun i => beta i * e (tok i) * x i (tok i) o) n + bq * e q * Y o.

Definition F (tok : nat -> nat) (o : nat) : R :=
  sumR (fun i => beta i * e (tok i) * X (tok i) o) n + bq * e q * Y o.

(* S_P for the placement P = the positions not holding m *)
Definition SP (tok : nat -> nat) : R := sumR (fun i => if (tok i =? m)%nat then 0 else beta i) n.

(* f_o(S) for the pure filling with token u *)
Definition f (u o : nat) (S : R) : R :=
  (B - S) * e m * X m o + bq * e q * Y o + S * (e u * X u o).

(** Lemma 1 (relaxed sign form). *)
Lemma cubic_lemma1 : forall tok o, Sigma tok o <= F tok o.
Proof.
  intros tok o. unfold Sigma, F. apply Rplus_le_compat_r, sumR_le. intros i Hi.
  apply Rmult_le_compat_l.
  - apply Rmult_le_pos; left; [apply beta_pos; assumption | apply e_pos].
  - unfold x, X, D. specialize (Dp_ge i o Hi). lra.
Qed.

Lemma exists_argmax : forall (g : nat -> R) (G : list nat), G <> [] ->
  exists u, In u G /\ forall u', In u' G -> g u' <= g u.
Proof.
  intros g G; induction G as [|a G IH]; intros H; [contradiction|].
  destruct G as [|b G].
  - exists a. split; [left; reflexivity|]. intros u' [<-|[]]; lra.
  - destruct IH as [u [Hu Hmax]]; [discriminate|].
    destruct (Rle_dec (g a) (g u)).
    + exists u. split; [right; assumption|]. intros u' [<-|Hu']; [assumption | apply Hmax; assumption].
    + exists a. split; [left; reflexivity|]. intros u' [<-|Hu']; [lra|].
      specialize (Hmax u' Hu'). lra.
Qed.

(** Lemmas 2 and 3: a mixed filling from G is dominated by a pure one,
    and a pure one is the affine f_o at S = S_P. *)
Lemma cubic_lemma2_3 : forall tok G o,
  (forall i, (i < n)%nat -> tok i = m \/ In (tok i) G) -> G <> [] ->
  exists u, In u G /\ F tok o <= f u o (SP tok).
Proof.
  intros tok G o Htok HG.
  destruct (exists_argmax (fun u => e u * X u o) G HG) as [u [Hu Hmax]].
  exists u. split; [assumption|]. unfold F, f, SP, B.
  assert (Hle : sumR (fun i => beta i * e (tok i) * X (tok i) o) n
              <= sumR (fun i => if (tok i =? m)%nat then beta i * (e m * X m o)
                                else beta i * (e u * X u o)) n).
  { apply sumR_le. intros i Hi. destruct (Nat.eqb_spec (tok i) m) as [->|Hne]; [lra|].
    destruct (Htok i Hi) as [|HG']; [contradiction|].
    specialize (Hmax _ HG'). rewrite Rmult_assoc.
    apply Rmult_le_compat_l; [left; apply beta_pos; assumption | assumption]. }
  rewrite sumR_if in Hle.
  rewrite (sumR_ext (fun i => if (tok i =? m)%nat then 0 else beta i * (e u * X u o))
                    (fun i => (if (tok i =? m)%nat then 0 else beta i) * (e u * X u o))) in Hle
    by (intros; destruct (_ =? _)%nat; ring).
  rewrite (sumR_ext (fun i => if (tok i =? m)%nat then beta i * (e m * X m o) else 0)
                    (fun i => (beta i - (if (tok i =? m)%nat then 0 else beta i)) * (e m * X m o)))
    in Hle by (intros; destruct (_ =? _)%nat; ring).
  rewrite sumR_scal_r, sumR_scal_r, sumR_minus in Hle. lra.
Qed.

(** The class argument (Theorem (cubic), c >= 1): every sequence whose
    non-query tokens are m or in the good set G (at least one not m) is
    correct, given the checker's confirmation of each good token at both
    ends S_lo <= S_P <= S_hi. *)
Theorem cubic_class_sound : forall tok G Slo Shi,
  (forall i, (i < n)%nat -> tok i = m \/ In (tok i) G) ->
  (exists i, (i < n)%nat /\ tok i <> m) ->
  Slo <= SP tok <= Shi ->
  (forall u o, In u G -> (o < v)%nat -> o <> m -> f u o Slo < 0 /\ f u o Shi < 0) ->
  forall o, (o < v)%nat -> o <> m -> Sigma tok o < 0.
Proof.
  intros tok G Slo Shi Htok [i [Hi Hne]] HS Hgood o Ho Hom.
  assert (HG : G <> []).
  { destruct (Htok i Hi) as [|H]; [contradiction|]. intros ->; destruct H. }
  destruct (cubic_lemma2_3 tok G o Htok HG) as [u [Hu Hf]].
  destruct (Hgood u o Hu Ho Hom) as [Hlo Hhi].
  apply Rle_lt_trans with (F tok o); [apply cubic_lemma1|].
  apply Rle_lt_trans with (f u o (SP tok)); [assumption|].
  unfold f in *.
  set (a := B * e m * X m o + bq * e q * Y o).
  set (b := e u * X u o - e m * X m o).
  assert (Hf' : forall S, (B - S) * e m * X m o + bq * e q * Y o + S * (e u * X u o) = a + b * S)
    by (intros; unfold a, b; ring).
  rewrite Hf' in *. apply (affine_neg_at_ends a b Slo Shi); assumption.
Qed.

(** c = 0: the single sequence (m, ..., m, q). *)
Theorem cubic_c0_sound : forall tok,
  (forall i, (i < n)%nat -> tok i = m) ->
  (forall o, (o < v)%nat -> o <> m -> B * e m * X m o + bq * e q * Y o < 0) ->
  forall o, (o < v)%nat -> o <> m -> Sigma tok o < 0.
Proof.
  intros tok Htok Hz o Ho Hom. apply Rle_lt_trans with (F tok o); [apply cubic_lemma1|].
  unfold F, B. rewrite (sumR_ext _ (fun i => beta i * (e m * X m o)))
    by (intros i Hi; rewrite (Htok i Hi); ring).
  rewrite sumR_scal_r. specialize (Hz o Ho Hom). unfold B in Hz. lra.
Qed.

(** Lemma 4 (the two checks): (I) at o = u and, for o not in {m, u},
    either the split bound (II) or the exact check (II'). *)
Theorem cubic_lemma4 : forall u S, 0 <= S ->
  let A o := (B - S) * e m * X m o + bq * e q * Y o in
  A u + S * (e u * X u u) < 0 ->                                         (* (I) *)
  ((exists Amax Dmax Vmax,
      (forall o, (o < v)%nat -> o <> m -> o <> u ->
         A o <= Amax /\ D o <= Dmax /\ EVOU u o - EVOU u m <= Vmax) /\
      Amax + S * (e u * (Dmax + Vmax)) < 0)                              (* (II) *)
   \/ (forall o, (o < v)%nat -> o <> m -> o <> u -> A o + S * (e u * X u o) < 0)) -> (* (II') *)
  forall o, (o < v)%nat -> o <> m -> f u o S < 0.
Proof.
  intros u S HS A HI HII o Ho Hom. unfold f. fold (A o).
  destruct (Nat.eq_dec o u) as [->|Hou]; [exact HI|].
  destruct HII as [[Amax [Dmax [Vmax [Hb Hneg]]]]|HII'].
  - destruct (Hb o Ho Hom Hou) as [HA [HD HV]].
    assert (HX : X u o <= Dmax + Vmax) by (unfold X; lra).
    assert (0 <= S * e u) by (apply Rmult_le_pos; [assumption | left; apply e_pos]).
    assert (S * (e u * X u o) <= S * (e u * (Dmax + Vmax))) by nra. lra.
  - apply HII'; assumption.
Qed.

(** Rule cubic_mix, Lemmas M and M2 with the class argument (spec/rules.md
    §cubic_mix): the fixed part split evenly over the c positions holding a
    token < m.  If Psi i bounds position i's share for every output o <> m and
    the shares sum below 0, the sequence is correct. *)
Theorem cubic_mix_class_sound : forall tok (Psi : nat -> R),
  let c := sumR (fun i => if (tok i =? m)%nat then 0 else 1) n in
  let RP := sumR (fun i => if (tok i =? m)%nat then beta i else 0) n in
  let A o := RP * e m * X m o + bq * e q * Y o in
  (forall i o, (i < n)%nat -> tok i <> m -> (o < v)%nat -> o <> m ->
     A o + c * beta i * (e (tok i) * X (tok i) o) <= Psi i) ->
  sumR (fun i => if (tok i =? m)%nat then 0 else Psi i) n < 0 ->
  forall o, (o < v)%nat -> o <> m -> Sigma tok o < 0.
Proof.
  intros tok Psi c RP A Hpsi Hsum o Ho Hom.
  set (g i := beta i * (e (tok i) * X (tok i) o)).
  (* F = A o + the positions holding a token < m *)
  assert (HF : F tok o = A o + sumR (fun i => if (tok i =? m)%nat then 0 else g i) n).
  { unfold F, A, RP. rewrite (sumR_split (fun i => (tok i =? m)%nat)).
    rewrite (sumR_ext (fun i => if (tok i =? m)%nat then beta i * e (tok i) * X (tok i) o else 0)
                      (fun i => (if (tok i =? m)%nat then beta i else 0) * (e m * X m o)))
      by (intros i _; destruct (Nat.eqb_spec (tok i) m) as [->|]; ring).
    rewrite (sumR_ext (fun i => if (tok i =? m)%nat then 0 else beta i * e (tok i) * X (tok i) o)
                      (fun i => if (tok i =? m)%nat then 0 else g i))
      by (intros i _; unfold g; destruct (_ =? _)%nat; ring).
    rewrite sumR_scal_r. ring. }
  (* c * F = the sum over those positions of A o + c * g i *)
  assert (HcF : c * F tok o
                = sumR (fun i => if (tok i =? m)%nat then 0 else A o + c * g i) n).
  { rewrite HF, (sumR_ext (fun i => if (tok i =? m)%nat then 0 else A o + c * g i)
                          (fun i => (if (tok i =? m)%nat then 0 else 1) * A o
                                    + c * (if (tok i =? m)%nat then 0 else g i)))
      by (intros i _; destruct (_ =? _)%nat; ring).
    rewrite sumR_plus, sumR_scal_r, sumR_scal_l. fold c. ring. }
  assert (Hle : c * F tok o <= sumR (fun i => if (tok i =? m)%nat then 0 else Psi i) n).
  { rewrite HcF. apply sumR_le. intros i Hi.
    destruct (Nat.eqb_spec (tok i) m) as [|Hne]; [lra|].
    unfold g. rewrite <- Rmult_assoc. apply (Hpsi i o Hi Hne Ho Hom). }
  assert (Hc : 0 <= c) by (apply sumR_nonneg; intros i _; destruct (_ =? _)%nat; lra).
  apply Rle_lt_trans with (F tok o); [apply cubic_lemma1|].
  destruct (Rlt_or_le (F tok o) 0) as [|HF0]; [assumption|].
  assert (0 <= c * F tok o) by (apply Rmult_le_pos; assumption). lra.
Qed.

End CubicClass.

(** Rule cubic_mix, Lemma M3 (placements "bounds"): for R_P in [Rlo, Rhi] and
    c·beta_i in [Wlo, Whi], each output's share is at most its maximum over the
    interval ends, term by term (what the upper-bound products compute). *)
Lemma cubic_mix_lemma_M3 : forall R Rlo Rhi w Wlo Whi x y z,
  Rlo <= R <= Rhi -> Wlo <= w <= Whi ->
  R * x + y + w * z <= Rmax (Rlo * x) (Rhi * x) + y + Rmax (Wlo * z) (Whi * z).
Proof.
  intros R Rlo Rhi w Wlo Whi x y z [HR1 HR2] [Hw1 Hw2].
  assert (HR : R * x <= Rmax (Rlo * x) (Rhi * x)).
  { destruct (Rle_or_lt 0 x).
    - apply Rle_trans with (Rhi * x); [nra | apply Rmax_r].
    - apply Rle_trans with (Rlo * x); [nra | apply Rmax_l]. }
  assert (Hw : w * z <= Rmax (Wlo * z) (Whi * z)).
  { destruct (Rle_or_lt 0 z).
    - apply Rle_trans with (Whi * z); [nra | apply Rmax_r].
    - apply Rle_trans with (Wlo * z); [nra | apply Rmax_l]. }
  lra.
Qed.
